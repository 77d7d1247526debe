package configs

import (
	"fmt"
	"io"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// NewLogger returns a zap logger writing to w in the configured format
// (JSON, or human-readable console lines) and level, with every control
// character but a tab and a newline escaped (controlSafe).
func (l LogConfig) NewLogger(w io.Writer) (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(l.Level)
	if err != nil {
		return nil, fmt.Errorf("log.level: %q: %w", l.Level, err)
	}
	var enc zapcore.Encoder
	switch l.Format {
	case "json":
		ec := zap.NewProductionEncoderConfig()
		ec.EncodeTime = zapcore.ISO8601TimeEncoder
		enc = zapcore.NewJSONEncoder(ec)
	case "console":
		ec := zap.NewDevelopmentEncoderConfig()
		ec.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
		enc = zapcore.NewConsoleEncoder(ec)
	default:
		return nil, fmt.Errorf("log.format: %q must be \"json\" or \"console\"", l.Format)
	}
	core := zapcore.NewCore(controlSafe{enc}, zapcore.Lock(zapcore.AddSync(w)), level)
	return zap.New(core, zap.ErrorOutput(zapcore.Lock(zapcore.AddSync(w)))), nil
}
