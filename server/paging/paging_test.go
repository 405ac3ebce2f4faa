package paging

import "testing"

func TestLimit(t *testing.T) {
	n := func(v int32) *int32 { return &v }
	tests := []struct {
		name    string
		in      *int32
		want    int
		wantErr bool
	}{
		{"absent is 100", nil, 100, false},
		{"one", n(1), 1, false},
		{"hundred", n(100), 100, false},
		{"zero", n(0), 0, true},
		{"negative", n(-5), 0, true},
		{"over", n(101), 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Limit(tt.in)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("Limit = %d, %v; want %d, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}
