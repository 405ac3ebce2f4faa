package poll

import (
	"fmt"
	"testing"
	"time"
)

// recorder is a testing.TB that notes Fatalf instead of ending the test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func TestUntil(t *testing.T) {
	t.Run("holds on the third ask", func(t *testing.T) {
		r := &recorder{TB: t}
		n := 0
		Until(r, time.Minute, "three asks", func() (bool, string) { n++; return n == 3, fmt.Sprint(n) })
		if r.failed != "" || n != 3 {
			t.Errorf("asked %d times, failed %q; want 3 asks, no failure", n, r.failed)
		}
	})
	t.Run("never holds", func(t *testing.T) {
		r := &recorder{TB: t}
		// Fatalf does not stop the loop here: the condition ends it
		// once the failure is recorded.
		Until(r, 0, "nothing", func() (bool, string) { return r.failed != "", "still not" })
		if want := "nothing: not within 0s: still not"; r.failed != want {
			t.Errorf("failed %q, want %q", r.failed, want)
		}
	})
}
