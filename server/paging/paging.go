// Package paging owns AWS's list parameters as every list operation checks
// them: maxResults is 1–100 (100 when absent), and a nextToken that does not
// open (forged, altered, or from another listing) is an
// InvalidParameterException.
package paging

import (
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/store"
)

// Limit validates maxResults and returns the page size.
func Limit(maxResults *int32) (int, error) {
	if maxResults == nil {
		return store.MaxPageSize, nil
	}
	if n := *maxResults; n < 1 || n > store.MaxPageSize {
		return 0, errdefs.InvalidParameter("maxResults must be between 1 and %d, got %d.", store.MaxPageSize, n)
	}
	return int(*maxResults), nil
}

// InvalidToken is the error for a nextToken the store refused.
func InvalidToken(cause error) *errdefs.Error {
	return errdefs.InvalidParameter("The nextToken provided is not valid.").WithCause(cause)
}
