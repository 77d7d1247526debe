package devdb

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
)

// Sizes and codes of the MongoDB wire protocol that the front needs.
const (
	// headerLen is the length of the standard message header: messageLength,
	// requestID, responseTo and opCode, four little-endian int32s.
	headerLen = 16

	// MaxMessageSize is the largest message the front accepts, in bytes. It is
	// MongoDB's (and FerretDB's) maxMessageSizeBytes.
	MaxMessageSize = 48_000_000

	opQuery = 2004
	opMsg   = 2013

	// msgMoreToCome is the OP_MSG flag bit telling the receiver not to reply
	// (on a request) or that another reply follows (on a reply).
	msgMoreToCome = 1 << 1
)

// errFrameLength reports a message whose length field is out of bounds.
type errFrameLength struct {
	length int32
}

func (e *errFrameLength) Error() string {
	return fmt.Sprintf("message length %d outside [%d, %d]", e.length, headerLen, MaxMessageSize)
}

// message is one whole wire message, header included.
type message []byte

// readMessage reads one whole message from r. It reuses buf when it is large
// enough. It returns io.EOF only when r ends cleanly between messages.
func readMessage(r *bufio.Reader, buf []byte) (message, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}

	length := int32(binary.LittleEndian.Uint32(hdr[:]))
	if length < headerLen || length > MaxMessageSize {
		return nil, &errFrameLength{length: length}
	}

	if cap(buf) < int(length) {
		buf = make([]byte, length)
	}
	buf = buf[:length]
	copy(buf, hdr[:])

	if _, err := io.ReadFull(r, buf[4:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}

	return message(buf), nil
}

func (m message) requestID() int32  { return int32(binary.LittleEndian.Uint32(m[4:8])) }
func (m message) responseTo() int32 { return int32(binary.LittleEndian.Uint32(m[8:12])) }
func (m message) opCode() int32     { return int32(binary.LittleEndian.Uint32(m[12:16])) }

// moreToCome reports whether m is an OP_MSG with the moreToCome flag set.
func (m message) moreToCome() bool {
	if m.opCode() != opMsg || len(m) < headerLen+4 {
		return false
	}

	return binary.LittleEndian.Uint32(m[16:20])&msgMoreToCome != 0
}

// commandName returns the first key of the command document of an OP_MSG or
// an OP_QUERY on a "$cmd" collection, or "" when m is anything else or
// malformed.
func (m message) commandName() string {
	switch m.opCode() {
	case opMsg:
		// flagBits, then sections: kind 0 is one BSON document (the
		// command); kind 1 is a size-prefixed document sequence.
		body := m[headerLen:]
		if len(body) < 4 {
			return ""
		}
		sections := body[4:]

		for len(sections) > 0 {
			kind := sections[0]
			sections = sections[1:]

			if len(sections) < 4 {
				return ""
			}
			size := int(binary.LittleEndian.Uint32(sections[:4]))
			if size < 4 || size > len(sections) {
				return ""
			}

			switch kind {
			case 0:
				return firstKey(sections[:size])
			case 1:
				sections = sections[size:]
			default:
				return ""
			}
		}

		return ""

	case opQuery:
		// flags, fullCollectionName (cstring), numberToSkip,
		// numberToReturn, query document.
		body := m[headerLen:]
		if len(body) < 4 {
			return ""
		}
		rest := body[4:]

		end := bytes.IndexByte(rest, 0)
		if end < 0 || !bytes.HasSuffix(rest[:end], []byte(".$cmd")) {
			return ""
		}
		rest = rest[end+1:]

		if len(rest) < 8 {
			return ""
		}

		return firstKey(rest[8:])

	default:
		return ""
	}
}

// firstKey returns the name of the first element of the BSON document doc,
// or "" when doc is empty or malformed.
func firstKey(doc []byte) string {
	// int32 length, element type byte, cstring name...
	if len(doc) < 6 || doc[4] == 0 {
		return ""
	}

	name := doc[5:]
	end := bytes.IndexByte(name, 0)
	if end < 0 {
		return ""
	}

	return string(name[:end])
}

// pingMessage builds an OP_MSG request {ping: 1, $db: "admin"} with the
// given request id.
func pingMessage(requestID int32) message {
	// BSON: {ping: int32(1), $db: "admin"}
	var doc []byte
	doc = append(doc, 0, 0, 0, 0) // length, patched below
	doc = append(doc, 0x10)       // int32
	doc = append(doc, "ping\x00"...)
	doc = binary.LittleEndian.AppendUint32(doc, 1)
	doc = append(doc, 0x02) // string
	doc = append(doc, "$db\x00"...)
	doc = binary.LittleEndian.AppendUint32(doc, uint32(len("admin")+1))
	doc = append(doc, "admin\x00"...)
	doc = append(doc, 0) // end of document
	binary.LittleEndian.PutUint32(doc[:4], uint32(len(doc)))

	msg := make([]byte, headerLen, headerLen+4+1+len(doc))
	binary.LittleEndian.PutUint32(msg[4:8], uint32(requestID))
	binary.LittleEndian.PutUint32(msg[12:16], opMsg)
	msg = binary.LittleEndian.AppendUint32(msg, 0) // flagBits
	msg = append(msg, 0)                           // section kind 0
	msg = append(msg, doc...)
	binary.LittleEndian.PutUint32(msg[:4], uint32(len(msg)))

	return message(msg)
}
