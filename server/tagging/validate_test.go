package tagging

import (
	"fmt"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	fifty := map[string]string{}
	for i := 0; i < 50; i++ {
		fifty[fmt.Sprintf("k%d", i)] = "v"
	}
	fiftyOne := map[string]string{"extra": ""}
	for k, v := range fifty {
		fiftyOne[k] = v
	}
	tests := []struct {
		name    string
		tags    map[string]string
		wantErr string
	}{
		{"none", nil, ""},
		{"empty value allowed", map[string]string{"k": ""}, ""},
		{"fifty tags", fifty, ""},
		{"fifty-one tags", fiftyOne, "at most 50"},
		{"empty key", map[string]string{"": "v"}, "length"},
		{"key of 128 characters", map[string]string{strings.Repeat("k", 128): "v"}, ""},
		{"key of 129 characters", map[string]string{strings.Repeat("k", 129): "v"}, "length"},
		{"value of 256 characters", map[string]string{"k": strings.Repeat("v", 256)}, ""},
		{"value of 257 characters", map[string]string{"k": strings.Repeat("v", 257)}, "exceeds 256"},
		{"multibyte counted as characters", map[string]string{"k": strings.Repeat("é", 256)}, ""},
		{"reserved prefix", map[string]string{"aws:cloudformation:stack": "x"}, "reserved"},
		{"reserved prefix in any case", map[string]string{"AWS:x": "x"}, "reserved"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.tags)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Validate = %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Validate = %v, want error containing %q", err, tc.wantErr)
			}
		})
	}
}
