package store

// Exported for the external tests of this package only.
var (
	ConflictBackoff      = conflictBackoff
	ConflictBackoffBound = conflictBackoffBound
)
