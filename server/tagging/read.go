package tagging

import (
	"context"
)

// List returns the resource's tags.
func (s *Service) List(ctx context.Context, raw string) (map[string]string, error) {
	arn, r, err := s.resolve(ctx, raw)
	if err != nil {
		return nil, err
	}
	tags, err := r.Tags(ctx, arn)
	if err != nil {
		return nil, err
	}
	if tags == nil {
		tags = map[string]string{}
	}
	return tags, nil
}
