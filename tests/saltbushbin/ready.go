package saltbushbin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// ErrExited is WaitReady's error when the process exited before it was
// ready.
var ErrExited = errors.New("exited before ready")

// WaitReady polls the /readyz of the façade at baseURL until it answers
// 200 (the replica reaches etcd), the process exits (exited closes), or
// ctx ends.
func WaitReady(ctx context.Context, baseURL string, exited <-chan struct{}) error {
	client := &http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/readyz", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET /readyz: %s", resp.Status)
		}
		select {
		case <-tick.C:
		case <-exited:
			return ErrExited
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w (last: %v)", ctx.Err(), err)
		}
	}
}
