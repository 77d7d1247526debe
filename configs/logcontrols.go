package configs

import (
	"github.com/docketq/docket/internal/printable"
	"go.uber.org/zap/buffer"
	"go.uber.org/zap/zapcore"
)

// controlSafe wraps a log encoder so that no line it writes holds a
// control character a terminal acts on: zap's encoders escape C0 only
// inside JSON strings and leave DEL and the C1 controls raw, and the
// console encoder writes the message raw. Every control but a tab and a
// newline is written as \u00XX (printable.EscapeControls), as a JSON
// string reads it back, so that a job id, kind or error another program
// stored reaches the terminal escaped.
type controlSafe struct{ zapcore.Encoder }

var logBuffers = buffer.NewPool()

func (e controlSafe) Clone() zapcore.Encoder { return controlSafe{e.Encoder.Clone()} }

func (e controlSafe) EncodeEntry(ent zapcore.Entry, fields []zapcore.Field) (*buffer.Buffer, error) {
	buf, err := e.Encoder.EncodeEntry(ent, fields)
	if err != nil || !printable.HasControls(buf.Bytes()) {
		return buf, err
	}
	out := logBuffers.Get()
	_, _ = out.Write(printable.EscapeControls(nil, buf.Bytes()))
	buf.Free()
	return out, nil
}
