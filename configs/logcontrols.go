package configs

import (
	"go.uber.org/zap/buffer"
	"go.uber.org/zap/zapcore"
)

// controlSafe wraps a log encoder so that no line it writes holds a
// control character a terminal acts on: zap's encoders escape C0 only
// inside JSON strings and leave DEL and the C1 controls (U+0080–U+009F;
// U+009B acts as ESC [) raw, and the console encoder writes the message
// raw. Every control but a tab and a newline is written as \u00XX, as a
// JSON string reads it back, so that a job id, kind or error another
// program stored reaches the terminal escaped.
type controlSafe struct{ zapcore.Encoder }

var logBuffers = buffer.NewPool()

func (e controlSafe) Clone() zapcore.Encoder { return controlSafe{e.Encoder.Clone()} }

func (e controlSafe) EncodeEntry(ent zapcore.Entry, fields []zapcore.Field) (*buffer.Buffer, error) {
	buf, err := e.Encoder.EncodeEntry(ent, fields)
	if err != nil || !hasControl(buf.Bytes()) {
		return buf, err
	}
	out := logBuffers.Get()
	escapeControls(out, buf.Bytes())
	buf.Free()
	return out, nil
}

// hasControl reports whether b, UTF-8, holds a control escapeControls
// escapes.
func hasControl(b []byte) bool {
	for i, c := range b {
		if control(c) || c == 0xC2 && i+1 < len(b) && b[i+1] >= 0x80 && b[i+1] <= 0x9F {
			return true
		}
	}
	return false
}

// control reports whether the byte c is a C0 control other than a tab or
// a newline, or DEL.
func control(c byte) bool { return c < 0x20 && c != '\t' && c != '\n' || c == 0x7F }

// escapeControls appends b to out with each control (control, and the C1
// controls, 0xC2 0x80–0x9F in UTF-8) written as \u00XX.
func escapeControls(out *buffer.Buffer, b []byte) {
	const hex = "0123456789abcdef"
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case control(c):
		case c == 0xC2 && i+1 < len(b) && b[i+1] >= 0x80 && b[i+1] <= 0x9F:
			i++
			c = b[i]
		default:
			out.AppendByte(c)
			continue
		}
		out.AppendString(`\u00`)
		out.AppendByte(hex[c>>4])
		out.AppendByte(hex[c&0xF])
	}
}
