package printable

// EscapeControls appends b, UTF-8 text, to dst with every control
// character but a tab and a newline (C0, DEL and the C1 controls U+0080 to
// U+009F) written as \u00XX, which a JSON string reads back as the same
// character: JSON encoders escape C0 only, and leave DEL and C1 raw, on
// which a terminal acts (U+009B starts an escape sequence as ESC [ does).
func EscapeControls(dst, b []byte) []byte {
	const hex = "0123456789abcdef"
	for i := 0; i < len(b); i++ {
		c, n := controlAt(b, i)
		if n == 0 {
			dst = append(dst, b[i])
			continue
		}
		dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
		i += n - 1
	}
	return dst
}

// HasControls reports whether b holds a control EscapeControls escapes.
func HasControls(b []byte) bool {
	for i := range b {
		if _, n := controlAt(b, i); n > 0 {
			return true
		}
	}
	return false
}

// controlAt returns the control character that starts at b[i] and its
// length in bytes, or a length of 0: a C0 control but a tab and a
// newline, DEL, or a C1 control (0xC2 0x80 to 0xC2 0x9F in UTF-8).
func controlAt(b []byte, i int) (c byte, n int) {
	switch c = b[i]; {
	case c < 0x20 && c != '\t' && c != '\n', c == 0x7F:
		return c, 1
	case c == 0xC2 && i+1 < len(b) && b[i+1] >= 0x80 && b[i+1] <= 0x9F:
		return b[i+1], 2
	}
	return 0, 0
}
