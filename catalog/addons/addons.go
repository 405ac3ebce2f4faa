// Package addons holds the managed add-on catalogue as data: one directory per
// add-on with its addon.yaml, and per version a JSON Schema for
// configurationValues and the bundle templates (see README.md).
//
// The data is embedded so that the server (which answers DescribeAddonVersions
// and validates configuration) and the agent (which renders bundles) carry the
// same catalogue and cannot drift apart. Package server/catalog parses and
// validates it; this package only ships the bytes.
package addons

import (
	"embed"
	"io/fs"
)

// data embeds every add-on directory (the */* pattern leaves out this file and
// README.md). Files whose names start with "." or "_" are not embedded.
//
//go:embed */*
var data embed.FS

// FS returns the catalogue rooted at the add-on directories:
// "coredns/addon.yaml", "coredns/v1.11.4-eksbuild.2/schema.json", ...
func FS() fs.FS {
	return data
}
