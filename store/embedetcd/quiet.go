package embedetcd

import (
	"os"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// quietLogger logs etcd's errors to stderr, minus the ones etcd emits for
// its own listeners on every clean shutdown ("setting up serving ... failed:
// server closed"), which would otherwise bury real errors.
func quietLogger() *zap.Logger {
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	core := zapcore.NewCore(enc, zapcore.Lock(os.Stderr), zapcore.ErrorLevel)
	return zap.New(shutdownNoiseFilter{core})
}

type shutdownNoiseFilter struct{ zapcore.Core }

func (f shutdownNoiseFilter) With(fields []zapcore.Field) zapcore.Core {
	return shutdownNoiseFilter{f.Core.With(fields)}
}

func (f shutdownNoiseFilter) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if f.Enabled(e.Level) {
		return ce.AddCore(e, f)
	}
	return ce
}

func (f shutdownNoiseFilter) Write(e zapcore.Entry, fields []zapcore.Field) error {
	if strings.HasPrefix(e.Message, "setting up serving from embedded etcd failed") {
		for _, fl := range fields {
			if fl.Key != "error" {
				continue
			}
			if err, ok := fl.Interface.(error); ok && isClosedListener(err.Error()) {
				return nil
			}
		}
	}
	return f.Core.Write(e, fields)
}

func isClosedListener(msg string) bool {
	return strings.Contains(msg, "server closed") || strings.Contains(msg, "Server closed") ||
		strings.Contains(msg, "use of closed network connection") || strings.Contains(msg, "has been stopped")
}
