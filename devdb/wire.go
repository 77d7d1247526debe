package devdb

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
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

	// codeMaxTimeMSExpired is MongoDB's error code for a command whose
	// maxTimeMS passed.
	codeMaxTimeMSExpired = 50
)

// errFrameLength reports a message whose length field is out of bounds.
type errFrameLength struct {
	length int32
}

func (e *errFrameLength) Error() string {
	return fmt.Sprintf("message length %d outside [%d, %d]", e.length, headerLen, MaxMessageSize)
}

// minChunk is the least the buffer of a message grows by, once more of the
// message has arrived.
const minChunk = 4 << 10

// message is one whole wire message, header included.
type message []byte

// readMessage reads one whole message from r. It reuses buf when it is large
// enough. It returns io.EOF only when r ends cleanly between messages.
//
// The buffer grows as the message's bytes arrive, never ahead of them by more
// than minChunk or twice what has arrived, so a length field alone (a 16-byte
// header announcing 48 MB) costs nothing. When grow is not nil it is called
// with the capacity the buffer is about to reach, before it is allocated; an
// error from it ends the read with that error.
func readMessage(r *bufio.Reader, buf []byte, grow func(newCap int) error) (message, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}

	length32 := int32(binary.LittleEndian.Uint32(hdr[:]))
	if length32 < headerLen || length32 > MaxMessageSize {
		return nil, &errFrameLength{length: length32}
	}
	length := int(length32)

	if cap(buf) < headerLen {
		buf = make([]byte, 0, headerLen)
	}
	buf = append(buf[:0], hdr[:]...)

	for len(buf) < length {
		if len(buf) == cap(buf) {
			// Allocate only once more bytes have arrived.
			if _, err := r.Peek(1); err != nil {
				return nil, unexpectedEOF(err)
			}

			newCap := min(length, max(2*cap(buf), len(buf)+r.Buffered(), minChunk))
			if grow != nil {
				if err := grow(newCap); err != nil {
					return nil, err
				}
			}
			grown := make([]byte, len(buf), newCap)
			copy(grown, buf)
			buf = grown
		}

		n, err := r.Read(buf[len(buf):min(cap(buf), length)])
		buf = buf[:len(buf)+n]
		if err != nil && len(buf) < length {
			return nil, unexpectedEOF(err)
		}
	}

	return message(buf), nil
}

// unexpectedEOF turns io.EOF, which means "between messages", into
// io.ErrUnexpectedEOF, for an end in the middle of one.
func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}

	return err
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
	return firstKey(m.commandDoc())
}

// maxTime returns the maxTimeMS of the command of an OP_MSG, or 0 when it has
// none, or one that is not a positive number: FerretDB then answers with the
// error, if any.
func (m message) maxTime() time.Duration {
	if m.opCode() != opMsg {
		return 0
	}

	doc := m.commandDoc()
	if doc == nil {
		return 0
	}
	v, err := bson.Raw(doc).LookupErr("maxTimeMS")
	if err != nil {
		return 0
	}

	var ms float64
	switch v.Type {
	case bson.TypeInt32:
		ms = float64(v.Int32())
	case bson.TypeInt64:
		ms = float64(v.Int64())
	case bson.TypeDouble:
		ms = v.Double()
	default:
		return 0
	}
	if !(ms > 0) || ms > math.MaxInt32 {
		return 0
	}

	return time.Duration(ms * float64(time.Millisecond))
}

// commandDoc returns the command document of an OP_MSG (its section of kind
// 0) or of an OP_QUERY on a "$cmd" collection, or nil when m is anything else
// or malformed. The document's own length is checked against m, not its
// contents.
func (m message) commandDoc() []byte {
	switch m.opCode() {
	case opMsg:
		// flagBits, then sections: kind 0 is one BSON document (the
		// command); kind 1 is a size-prefixed document sequence.
		body := m[headerLen:]
		if len(body) < 4 {
			return nil
		}
		sections := body[4:]

		for len(sections) > 0 {
			kind := sections[0]
			sections = sections[1:]

			if len(sections) < 4 {
				return nil
			}
			size := int(binary.LittleEndian.Uint32(sections[:4]))
			if size < 5 || size > len(sections) {
				return nil
			}

			switch kind {
			case 0:
				return sections[:size]
			case 1:
				sections = sections[size:]
			default:
				return nil
			}
		}

		return nil

	case opQuery:
		// flags, fullCollectionName (cstring), numberToSkip,
		// numberToReturn, query document.
		body := m[headerLen:]
		if len(body) < 4 {
			return nil
		}
		rest := body[4:]

		end := bytes.IndexByte(rest, 0)
		if end < 0 || !bytes.HasSuffix(rest[:end], []byte(".$cmd")) {
			return nil
		}
		rest = rest[end+1:]

		if len(rest) < 8 {
			return nil
		}
		rest = rest[8:]
		if len(rest) < 5 {
			return nil
		}
		size := int(binary.LittleEndian.Uint32(rest[:4]))
		if size < 5 || size > len(rest) {
			return nil
		}

		return rest[:size]

	default:
		return nil
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

// maxTimeExpiredReply builds the OP_MSG reply MongoDB sends for a command
// whose maxTimeMS passed before it finished: code 50, MaxTimeMSExpired.
func maxTimeExpiredReply(responseTo int32) message {
	doc, err := bson.Marshal(bson.D{
		{Key: "ok", Value: 0.0},
		{Key: "errmsg", Value: "operation exceeded time limit: maxTimeMS expired while waiting for the devdb command lock"},
		{Key: "code", Value: int32(codeMaxTimeMSExpired)},
		{Key: "codeName", Value: "MaxTimeMSExpired"},
	})
	if err != nil {
		panic(err) // a fixed document always marshals
	}

	return opMsgWith(0, responseTo, doc)
}

// opMsgWith builds an OP_MSG request or reply whose one section is doc.
func opMsgWith(requestID, responseTo int32, doc []byte) message {
	msg := make([]byte, headerLen, headerLen+4+1+len(doc))
	binary.LittleEndian.PutUint32(msg[4:8], uint32(requestID))
	binary.LittleEndian.PutUint32(msg[8:12], uint32(responseTo))
	binary.LittleEndian.PutUint32(msg[12:16], opMsg)
	msg = binary.LittleEndian.AppendUint32(msg, 0) // flagBits
	msg = append(msg, 0)                           // section kind 0
	msg = append(msg, doc...)
	binary.LittleEndian.PutUint32(msg[:4], uint32(len(msg)))

	return message(msg)
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
