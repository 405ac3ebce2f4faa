package catalog

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/distribution/reference"
)

// Registry hosts are kept out of the catalogue, embedded or published:
// where images come from is the nodes' registry mirror configuration, never
// an add-on. Two checks hold a version to it: every file is searched for a
// reference with a host (descriptions and template literals included), and
// every image a render produces is parsed.
var (
	// hostRef is host[:port]/path:tag, the host being a dotted name or
	// carrying a port.
	hostRef = regexp.MustCompile(`\b[a-z0-9-]+(\.[a-z0-9-]+)*(\.[a-z0-9-]+|:[0-9]+)/[a-z0-9._/-]+:[A-Za-z0-9_][A-Za-z0-9_.-]*`)
	// hostImage is an image: line whose reference starts with a host (a
	// dot or a port before the first slash), tagged or not.
	hostImage = regexp.MustCompile(`(?m)^\s*-?\s*image:\s*"?[^\s"/{]*[.:][^\s"/]*/`)
)

// RegistryHost returns the first image reference in text that names a
// registry host, or "".
func RegistryHost(text string) string {
	if m := hostRef.FindString(text); m != "" {
		return m
	}
	return strings.TrimSpace(hostImage.FindString(text))
}

// checkNoRegistryHost fails when a catalogue file names a registry host.
func checkNoRegistryHost(name string, raw []byte) error {
	if m := RegistryHost(string(raw)); m != "" {
		return fmt.Errorf("%s: image reference with a registry host: %q (images come from the nodes' registry mirrors; name the repository only)", name, m)
	}
	return nil
}

// checkImages fails when a rendered object carries an image reference that
// is not one or names a registry host. Every string under a key "image"
// counts, wherever it sits (containers, initContainers, ephemeral
// containers, a custom resource's spec).
func checkImages(obj any) error {
	switch o := obj.(type) {
	case map[string]any:
		for k, v := range o {
			if s, ok := v.(string); ok && k == "image" {
				if err := checkImage(s); err != nil {
					return err
				}
				continue
			}
			if err := checkImages(v); err != nil {
				return err
			}
		}
	case []any:
		for _, v := range o {
			if err := checkImages(v); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkImage(ref string) error {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return fmt.Errorf("image %q is not an image reference: %v", ref, err)
	}
	// A host-less reference is normalised onto the default registry; only
	// one that spells a host out names one.
	if host := reference.Domain(named); strings.HasPrefix(ref, host+"/") {
		return fmt.Errorf("image %q names the registry host %s (images come from the nodes' registry mirrors; name the repository only)", ref, host)
	}
	return nil
}
