package catalog

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func noopVersion(t testing.TB, c *Catalog, version string) *Version {
	t.Helper()
	a, ok := c.Addon("saltbush-noop")
	if !ok {
		t.Fatal("saltbush-noop missing")
	}
	v, ok := a.Version(version)
	if !ok {
		t.Fatalf("saltbush-noop %s missing", version)
	}
	return v
}

func TestParseConfiguration(t *testing.T) {
	c := loadEmbedded(t)
	plain := noopVersion(t, c, "v1.0.0-eksbuild.1")
	required := noopVersion(t, c, "v1.1.0-eksbuild.1")

	tests := []struct {
		name string
		v    *Version
		raw  string
		want map[string]any
		// wantProblems are the exact paths reported; wantMessage must appear
		// in Error().
		wantProblems []string
		wantMessage  string
	}{
		{name: "empty", v: plain, raw: "", want: map[string]any{}},
		{name: "blank", v: plain, raw: " \n\t", want: map[string]any{}},
		{name: "empty object", v: plain, raw: "{}", want: map[string]any{}},
		{
			name: "JSON",
			v:    plain,
			raw:  `{"replicaCount": 3, "message": "hi", "labels": {"team": "a"}}`,
			want: map[string]any{"replicaCount": int64(3), "message": "hi", "labels": map[string]any{"team": "a"}},
		},
		{
			name: "YAML",
			v:    plain,
			raw:  "replicaCount: 3\nmessage: hi\nlabels:\n  team: a\n",
			want: map[string]any{"replicaCount": int64(3), "message": "hi", "labels": map[string]any{"team": "a"}},
		},
		{name: "YAML with a document start", v: plain, raw: "---\nmessage: hi\n", want: map[string]any{"message": "hi"}},
		{name: "integer written as a float", v: plain, raw: `{"replicaCount": 3.0}`, want: map[string]any{"replicaCount": int64(3)}},
		{
			name:         "required but empty",
			v:            required,
			raw:          "",
			wantProblems: []string{""},
			wantMessage:  "required by this version",
		},
		{
			name: "required and given",
			v:    required,
			raw:  `message: hi`,
			want: map[string]any{"message": "hi"},
		},
		{
			name:         "required property missing",
			v:            required,
			raw:          `{"replicaCount": 2}`,
			wantProblems: []string{""},
			wantMessage:  "missing property 'message'",
		},
		{
			name:         "too large",
			v:            plain,
			raw:          `{"message": "` + strings.Repeat("x", MaxConfigurationBytes) + `"}`,
			wantProblems: []string{""},
			wantMessage:  "exceeds the limit of 65536",
		},
		{name: "not JSON or YAML", v: plain, raw: `{"message": `, wantProblems: []string{""}, wantMessage: "not valid JSON or YAML"},
		{name: "bad YAML indentation", v: plain, raw: "message: a\n  b: c\n", wantProblems: []string{""}, wantMessage: "not valid JSON or YAML"},
		{name: "duplicate key", v: plain, raw: `{"message": "a", "message": "b"}`, wantProblems: []string{""}, wantMessage: "not valid JSON or YAML"},
		{name: "array", v: plain, raw: `[1, 2]`, wantProblems: []string{""}, wantMessage: "must be an object, not an array"},
		{name: "scalar", v: plain, raw: `hello`, wantProblems: []string{""}, wantMessage: "must be an object, not a string"},
		{name: "null", v: plain, raw: `null`, wantProblems: []string{""}, wantMessage: "must be an object, not null"},
		{name: "two documents", v: plain, raw: "message: a\n---\nmessage: b\n", wantProblems: []string{""}, wantMessage: "found 2"},
		{name: "integer above maximum", v: plain, raw: `{"replicaCount": 11}`, wantProblems: []string{"/replicaCount"}, wantMessage: "/replicaCount: "},
		{name: "integer below minimum", v: plain, raw: `replicaCount: 0`, wantProblems: []string{"/replicaCount"}, wantMessage: "/replicaCount: "},
		{name: "string for integer", v: plain, raw: `{"replicaCount": "3"}`, wantProblems: []string{"/replicaCount"}, wantMessage: "/replicaCount: "},
		{name: "fraction for integer", v: plain, raw: `{"replicaCount": 2.5}`, wantProblems: []string{"/replicaCount"}, wantMessage: "/replicaCount: "},
		{name: "string too long", v: plain, raw: `{"message": "` + strings.Repeat("x", 257) + `"}`, wantProblems: []string{"/message"}, wantMessage: "/message: "},
		{name: "nested type", v: plain, raw: `{"labels": {"team": 1}}`, wantProblems: []string{"/labels/team"}, wantMessage: "/labels/team: "},
		{name: "invalid label key", v: plain, raw: `{"labels": {"-bad": "x"}}`, wantProblems: []string{"/labels/-bad"}, wantMessage: `property name "-bad" is not allowed: '-bad' does not match pattern`},
		{name: "reserved label key", v: plain, raw: `{"labels": {"app.kubernetes.io/name": "x"}}`, wantProblems: []string{"/labels/app.kubernetes.io~1name"}},
		{
			name:         "additional property",
			v:            plain,
			raw:          `{"replicas": 3}`,
			wantProblems: []string{"/replicas"},
			wantMessage:  `/replicas: property "replicas" is not allowed`,
		},
		{
			name:         "additional property needing escape",
			v:            plain,
			raw:          `{"a/b~c": 1}`,
			wantProblems: []string{"/a~1b~0c"},
		},
		{
			name:         "every problem reported",
			v:            plain,
			raw:          `{"replicaCount": 99, "extra": true, "message": 1}`,
			wantProblems: []string{"/extra", "/message", "/replicaCount"},
			wantMessage:  "/extra: ",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.v.ParseConfiguration(tc.raw)
			if tc.wantProblems == nil {
				if err != nil {
					t.Fatalf("ParseConfiguration: %v", err)
				}
				if !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("got %#v, want %#v", got, tc.want)
				}
				return
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v (%T), want *ConfigError", err, err)
			}
			if got != nil {
				t.Errorf("values %v returned with an error", got)
			}
			var paths []string
			for _, p := range ce.Problems {
				paths = append(paths, p.Path)
				if p.Message == "" {
					t.Errorf("problem at %q has no message", p.Path)
				}
			}
			if !reflect.DeepEqual(paths, tc.wantProblems) {
				t.Errorf("problem paths %q, want %q (%v)", paths, tc.wantProblems, err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "addon saltbush-noop version "+tc.v.Version+": ") {
				t.Errorf("error %q does not name the add-on and version", msg)
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("error %q is not one line", msg)
			}
			for _, p := range tc.wantProblems {
				if p != "" && !strings.Contains(msg, p+": ") {
					t.Errorf("error %q does not name %s", msg, p)
				}
			}
			if !strings.Contains(msg, tc.wantMessage) {
				t.Errorf("error %q does not contain %q", msg, tc.wantMessage)
			}
		})
	}
}

// TestParseConfiguration_Examples checks the values every schema advertises
// are accepted as JSON.
func TestParseConfiguration_Examples(t *testing.T) {
	c := loadEmbedded(t)
	for _, a := range c.Addons() {
		for _, v := range a.Versions {
			t.Run(a.Name+"/"+v.Version, func(t *testing.T) {
				examples, err := v.Examples()
				if err != nil {
					t.Fatal(err)
				}
				if len(examples) == 0 {
					t.Fatal("the schema has no examples")
				}
				for _, ex := range examples {
					raw, err := toYAML(ex)
					if err != nil {
						t.Fatal(err)
					}
					got, err := v.ParseConfiguration(raw)
					if err != nil {
						t.Fatalf("ParseConfiguration(example): %v", err)
					}
					if !reflect.DeepEqual(got, ex) {
						t.Fatalf("got %#v, want %#v", got, ex)
					}
				}
			})
		}
	}
}

// samePlainJSONAnswer fails unless got, err (ParseConfiguration's answer
// to raw) are what reading raw as YAML gives: the same values, or the same
// error (word for word when the document could not be read; a schema
// error for a schema error, whose wording the schema library does not
// keep stable from one call to the next). Valid JSON the YAML parser
// refuses (it knows no "\/" escape) is read, as AWS reads JSON, and
// checked against the schema.
func samePlainJSONAnswer(t *testing.T, v *Version, raw string, got map[string]any, err error) {
	t.Helper()
	want, wantErr := v.parseConfiguration(raw, false)
	unreadable := func(err error) bool {
		var ce *ConfigError
		return errors.As(err, &ce) && (strings.Contains(err.Error(), "not valid JSON or YAML") ||
			strings.Contains(err.Error(), "a single JSON or YAML document is expected"))
	}
	if unreadable(wantErr) && !unreadable(err) && json.Valid([]byte(raw)) && utf8.ValidString(raw) {
		return
	}
	same := (err == nil) == (wantErr == nil) && reflect.DeepEqual(got, want)
	if err != nil && wantErr != nil {
		same = same && unreadable(err) == unreadable(wantErr) && (!unreadable(err) || err.Error() == wantErr.Error())
	}
	if !same {
		t.Fatalf("%q: got %#v, %v; read as YAML %#v, %v", raw, got, err, want, wantErr)
	}
}

// TestParseConfigurationPlainJSONIsYAML: JSON objects are read without
// the YAML parser, to the same values and the same errors.
func TestParseConfigurationPlainJSONIsYAML(t *testing.T) {
	c := loadEmbedded(t)
	v := noopVersion(t, c, "v1.0.0-eksbuild.1")
	tests := []struct {
		name, raw string
		plain     bool // plainJSON reads it (else the YAML path does)
	}{
		{name: "object", raw: `{"replicaCount": 3, "message": "hi", "labels": {"team": "a"}}`, plain: true},
		{name: "spaces around", raw: " \n{\"message\": \"hi\"}\n ", plain: true},
		{name: "float integer", raw: `{"replicaCount": 3.0}`, plain: true},
		{name: "exponent", raw: `{"replicaCount": 3e0}`, plain: true},
		{name: "fraction refused by the schema", raw: `{"replicaCount": 2.5}`, plain: true},
		{name: "huge integer", raw: `{"replicaCount": 123456789012345678901234567890}`, plain: true},
		{name: "unknown member", raw: `{"nope": [1, {"a": null}, true]}`, plain: true},
		{name: "escapes", raw: `{"message": "\u00e9\n\""}`, plain: true},
		{name: "JSON escape YAML refuses", raw: `{"message": "a\/b"}`, plain: true},
		{name: "wrong type", raw: `{"message": 7}`, plain: true},
		{name: "duplicate key", raw: `{"message": "a", "message": "b"}`},
		{name: "nested duplicate key", raw: `{"labels": {"a": "1", "a": "2"}}`},
		{name: "out of range number", raw: `{"replicaCount": 1e400}`},
		{name: "trailing data", raw: `{"message": "a"} {}`},
		{name: "invalid UTF-8", raw: "{\"\x99\": []}"},
		{name: "trailing comma", raw: `{"message": "a",}`},
		{name: "not an object", raw: `["message"]`},
		{name: "flow YAML", raw: `{message: hi}`},
		{name: "deep", raw: strings.Repeat(`{"a":`, maxJSONDepth+2) + "1" + strings.Repeat("}", maxJSONDepth+2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, ok := plainJSON(tt.raw); ok != tt.plain {
				t.Errorf("plainJSON read it: %v, want %v", ok, tt.plain)
			}
			got, err := v.ParseConfiguration(tt.raw)
			samePlainJSONAnswer(t, v, tt.raw, got, err)
		})
	}
}

func FuzzParseConfiguration(f *testing.F) {
	c := loadEmbedded(f)
	v := noopVersion(f, c, "v1.1.0-eksbuild.1")
	for _, seed := range []string{"", "{}", `{"message": "hi"}`, "message: hi\nlabels: {a: b}\n", "- 1", "a: &x [*x]",
		"---\n---\n", `{"replicaCount": 1e400}`, "message: !!binary aGk=",
		`{"replicaCount": 3, "labels": {"a": "b"}, "x": [1.5, null, true]}`, `{"message": "a\/b"}`, `{"a": 1, "a": 2}`} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got, err := v.ParseConfiguration(raw)
		samePlainJSONAnswer(t, v, raw, got, err)
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) || len(ce.Problems) == 0 {
				t.Fatalf("error %v is not a *ConfigError with problems", err)
			}
			return
		}
		if got == nil {
			t.Fatal("nil values without an error")
		}
		// Whatever is accepted must render.
		if _, err := v.Render(RenderParams{ClusterName: "fuzz", Values: got}); err != nil {
			t.Fatalf("accepted values do not render: %v", err)
		}
	})
}

// TestParseConfiguration_ImageRepositoryIsHostless checks that no override
// can point a bundle at a registry host: the nodes' mirrors decide that.
func TestParseConfiguration_ImageRepositoryIsHostless(t *testing.T) {
	c := loadEmbedded(t)
	for _, a := range c.Addons() {
		if a.Name == "saltbush-noop" || a.Name == "saltbush-pod-identity" {
			continue // runs no image
		}
		for _, v := range a.Versions {
			t.Run(a.Name+"/"+v.Version, func(t *testing.T) {
				if _, err := v.ParseConfiguration(`{"image": {"repository": "mirror/team/image", "tag": "v1.2.3"}}`); err != nil {
					t.Fatalf("host-less repository refused: %v", err)
				}
				for _, repo := range []string{"registry.example.com/eks/x", "mirror.example:5000/x", "localhost/x", "localhost", "Mirror/x", "x//y"} {
					_, err := v.ParseConfiguration(`{"image": {"repository": "` + repo + `"}}`)
					var ce *ConfigError
					if !errors.As(err, &ce) || len(ce.Problems) == 0 || !strings.HasPrefix(ce.Problems[0].Path, "/image/repository") {
						t.Errorf("repository %q: error %v, want a problem at /image/repository", repo, err)
					}
				}
			})
		}
	}
}
