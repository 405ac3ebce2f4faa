package tagging

import (
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"
)

// AWS tag limits.
const (
	MaxTags        = 50
	MaxKeyLength   = 128
	MaxValueLength = 256
	reservedPrefix = "aws:"
)

// Validate checks a complete tag set against AWS's limits. The error names
// the offending key; callers wrap it in the exception their operation models
// (InvalidParameterException on create, BadRequestException on TagResource).
func Validate(tags map[string]string) error {
	if len(tags) > MaxTags {
		return fmt.Errorf("a resource can have at most %d tags, got %d", MaxTags, len(tags))
	}
	keys := make([]string, 0, len(tags))
	for k := range tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := ValidateKey(k); err != nil {
			return err
		}
		if n := utf8.RuneCountInString(tags[k]); n > MaxValueLength {
			return fmt.Errorf("tag %q: value of %d characters exceeds %d", k, n, MaxValueLength)
		}
	}
	return nil
}

// ValidateKey checks one tag key.
func ValidateKey(k string) error {
	n := utf8.RuneCountInString(k)
	switch {
	case n < 1 || n > MaxKeyLength:
		return fmt.Errorf("tag key %q: length must be 1 to %d characters", k, MaxKeyLength)
	case strings.HasPrefix(strings.ToLower(k), reservedPrefix):
		return fmt.Errorf("tag key %q: the aws: prefix is reserved", k)
	}
	return nil
}
