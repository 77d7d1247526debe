// Copyright 2021 FerretDB Inc.
//
// Added for docket's devdb: a decoder of the stored documents' known shape
// that does in one pass over the bytes what Unmarshal (sjson.go) does with
// encoding/json, a quarter of devdb's time before. It takes only what it is
// sure of (compact ASCII keys, strings without escapes, plain numbers,
// objects and arrays whose fields match their schema in order) and hands
// anything else, a value or the whole document, to the original code, so
// its results are the original's: devdb's TestStoredValuesReadBackAsWritten.
// Parsed schemas are kept (schemaCache): the documents of a collection share
// a few. devdb builds with this file as internal/handler/sjson/fast.go of
// FerretDB v1.24.0 (_overlay/workspace.sh).
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//     http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

package sjson

import (
	"bytes"
	"encoding/hex"
	"strconv"
	"sync"
	"time"

	"github.com/FerretDB/FerretDB/internal/types"
)

// rawField is one field of a JSON object: its key (plain ASCII, no escape)
// and its value's bytes.
type rawField struct {
	key string
	val []byte
}

// unmarshalFast decodes a stored document, or reports false for the
// original Unmarshal to decode it (and give its error, if any).
func unmarshalFast(data []byte) (*types.Document, bool) {
	fields, ok := scanObject(data)
	if !ok || len(fields) == 0 || fields[0].key != "$s" {
		return nil, false
	}
	sch, ok := cachedSchema(fields[0].val)
	if !ok {
		return nil, false
	}
	return documentFast(fields[1:], sch)
}

// documentFast builds a document of fields in the order of sch's keys,
// which must be theirs.
func documentFast(fields []rawField, sch *schema) (*types.Document, bool) {
	if len(sch.Keys) != len(fields) {
		return nil, false
	}
	d := types.MakeDocument(len(fields))
	for i, f := range fields {
		if f.key != sch.Keys[i] {
			return nil, false // another order, or a key twice: the original decides
		}
		v, ok := valueFast(f.val, sch.Properties[f.key])
		if !ok {
			return nil, false
		}
		d.Set(f.key, v)
	}
	return d, true
}

// valueFast decodes one value by its schema; anything it is not sure of
// goes to the original unmarshalSingleValue.
func valueFast(data []byte, sch *elem) (any, bool) {
	if sch != nil && !bytes.Equal(data, []byte("null")) {
		if v, ok := scalarFast(data, sch.Type); ok {
			return v, true
		}
		if v, ok := compositeFast(data, sch); ok {
			return v, true
		}
	}
	v, err := unmarshalSingleValue(data, sch)
	return v, err == nil
}

// scalarFast decodes the common scalars from their plain form.
func scalarFast(data []byte, t elemType) (any, bool) {
	switch t {
	case elemTypeString:
		return plainString(data)
	case elemTypeObjectID:
		return objectIDFast(data)
	case elemTypeBool:
		switch string(data) {
		case "true":
			return true, true
		case "false":
			return false, true
		}
	case elemTypeDouble:
		if plainNumber(data) {
			if f, err := strconv.ParseFloat(string(data), 64); err == nil {
				return f, true
			}
		}
	case elemTypeInt:
		if plainNumber(data) {
			if n, err := strconv.ParseInt(string(data), 10, 32); err == nil {
				return int32(n), true
			}
		}
	case elemTypeLong, elemTypeDate:
		return int64Fast(data, t)
	case elemTypeTimestamp:
		if plainNumber(data) {
			if n, err := strconv.ParseUint(string(data), 10, 64); err == nil {
				return types.Timestamp(n), true
			}
		}
	}
	return nil, false
}

// int64Fast decodes a long, or a date's milliseconds.
func int64Fast(data []byte, t elemType) (any, bool) {
	if !plainNumber(data) {
		return nil, false
	}
	n, err := strconv.ParseInt(string(data), 10, 64)
	if err != nil {
		return nil, false
	}
	if t == elemTypeDate {
		return time.UnixMilli(n), true
	}
	return n, true
}

// objectIDFast decodes an ObjectID's 24 hex digits.
func objectIDFast(data []byte) (any, bool) {
	s, ok := plainString(data)
	if !ok {
		return nil, false
	}
	var id types.ObjectID
	if len(s.(string)) != 2*len(id) {
		return nil, false
	}
	if _, err := hex.Decode(id[:], []byte(s.(string))); err != nil {
		return nil, false
	}
	return id, true
}

// compositeFast decodes an object or an array.
func compositeFast(data []byte, sch *elem) (any, bool) {
	switch sch.Type {
	case elemTypeObject:
		fields, ok := scanObject(data)
		if !ok || len(fields) == 0 || sch.Schema == nil {
			return nil, false // {} and errors: the original
		}
		return documentFast(fields, sch.Schema)
	case elemTypeArray:
		items, ok := scanArray(data)
		if !ok || len(items) == 0 || len(items) != len(sch.Items) {
			return nil, false
		}
		a := types.MakeArray(len(items))
		for i, it := range items {
			v, ok := valueFast(it, sch.Items[i])
			if !ok {
				return nil, false
			}
			a.Append(v)
		}
		return a, true
	}
	return nil, false
}

// plainString decodes a JSON string of printable ASCII without escapes,
// which encoding/json would give as it stands.
func plainString(data []byte) (any, bool) {
	if len(data) < 2 || data[0] != '"' || data[len(data)-1] != '"' {
		return nil, false
	}
	s := data[1 : len(data)-1]
	for _, c := range s {
		if c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
			return nil, false
		}
	}
	return string(s), true
}

// plainNumber reports whether data is a number of JSON's grammar, which
// strconv then reads as encoding/json does.
func plainNumber(data []byte) bool {
	i := 0
	if i < len(data) && data[i] == '-' {
		i++
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case i < len(data) && data[i] >= '1' && data[i] <= '9':
		i = digits(data, i)
	default:
		return false
	}
	if i < len(data) && data[i] == '.' {
		j := digits(data, i+1)
		if j == i+1 {
			return false
		}
		i = j
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		j := digits(data, i)
		if j == i {
			return false
		}
		i = j
	}
	return i == len(data)
}

func digits(data []byte, i int) int {
	for i < len(data) && data[i] >= '0' && data[i] <= '9' {
		i++
	}
	return i
}

// scanObject splits a JSON object into its fields; false if data is not
// one object (spaces may lead, none may follow: encoding/json's Decoder
// would leave them unread, which Unmarshal refuses), or a key is not plain
// or is there twice.
func scanObject(data []byte) ([]rawField, bool) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return nil, false
	}
	i = skipSpace(data, i+1)
	fields := make([]rawField, 0, 16)
	if i < len(data) && data[i] == '}' {
		return fields, i+1 == len(data)
	}
	for {
		key, j, ok := scanKey(data, i)
		if !ok {
			return nil, false
		}
		val, j, ok := scanMember(data, j)
		if !ok {
			return nil, false
		}
		fields = append(fields, rawField{key: key, val: val})
		if j < len(data) && data[j] == '}' {
			return fields, j+1 == len(data) && uniqueKeys(fields)
		}
		if j >= len(data) || data[j] != ',' {
			return nil, false
		}
		i = skipSpace(data, j+1)
	}
}

// scanArray splits a JSON array into its items.
func scanArray(data []byte) ([][]byte, bool) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '[' {
		return nil, false
	}
	i = skipSpace(data, i+1)
	var items [][]byte
	if i < len(data) && data[i] == ']' {
		return items, i+1 == len(data)
	}
	for {
		val, j, ok := scanMember(data, i)
		if !ok {
			return nil, false
		}
		items = append(items, val)
		if j < len(data) && data[j] == ']' {
			return items, j+1 == len(data)
		}
		if j >= len(data) || data[j] != ',' {
			return nil, false
		}
		i = skipSpace(data, j+1)
	}
}

// scanKey reads a plain key and its colon at i: the key, and where its
// value begins.
func scanKey(data []byte, i int) (string, int, bool) {
	if i >= len(data) || data[i] != '"' {
		return "", 0, false
	}
	end := i + 1
	for end < len(data) && data[end] != '"' {
		if c := data[end]; c < 0x20 || c >= 0x80 || c == '\\' {
			return "", 0, false
		}
		end++
	}
	j := skipSpace(data, end+1)
	if end >= len(data) || j >= len(data) || data[j] != ':' {
		return "", 0, false
	}
	return string(data[i+1 : end]), skipSpace(data, j+1), true
}

// scanMember reads the value at i: its bytes, and where what follows it
// (after spaces) begins.
func scanMember(data []byte, i int) ([]byte, int, bool) {
	end, ok := skipValue(data, i)
	if !ok {
		return nil, 0, false
	}
	return data[i:end], skipSpace(data, end), true
}

// skipValue finds the end of the value at i. It checks the nesting only:
// the value itself is checked when it is decoded.
func skipValue(data []byte, i int) (int, bool) {
	if i >= len(data) {
		return 0, false
	}
	switch data[i] {
	case '"':
		return skipString(data, i)
	case '{', '[':
		return skipNested(data, i)
	}
	j := i
	for j < len(data) && !isDelimiter(data[j]) {
		j++
	}
	return j, j > i
}

// skipNested finds the end of the object or array at i.
func skipNested(data []byte, i int) (int, bool) {
	depth := 0
	for j := i; j < len(data); j++ {
		switch data[j] {
		case '"':
			end, ok := skipString(data, j)
			if !ok {
				return 0, false
			}
			j = end - 1
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return j + 1, true
			}
		}
	}
	return 0, false
}

// skipString finds the end of the string at i, past its closing quote.
func skipString(data []byte, i int) (int, bool) {
	for j := i + 1; j < len(data); j++ {
		switch data[j] {
		case '\\':
			j++
		case '"':
			return j + 1, true
		}
	}
	return 0, false
}

func isDelimiter(c byte) bool {
	return c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r'
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// uniqueKeys reports whether no key is there twice (encoding/json keeps
// the last; the original decides those).
func uniqueKeys(fields []rawField) bool {
	if len(fields) <= 8 {
		for i := range fields {
			for j := i + 1; j < len(fields); j++ {
				if fields[i].key == fields[j].key {
					return false
				}
			}
		}
		return true
	}
	seen := make(map[string]struct{}, len(fields))
	for _, f := range fields {
		if _, dup := seen[f.key]; dup {
			return false
		}
		seen[f.key] = struct{}{}
	}
	return true
}

// schemaCache holds parsed schemas by their JSON text. A schema is never
// changed once parsed, so one is shared by every document that has it.
var schemaCache = struct {
	sync.Mutex
	m map[string]*schema
}{m: map[string]*schema{}}

// maxCachedSchemas bounds the cache; when full it starts again.
const maxCachedSchemas = 1024

// cachedSchema parses a document's schema, or takes it from the cache.
func cachedSchema(jsch []byte) (*schema, bool) {
	schemaCache.Lock()
	sch, ok := schemaCache.m[string(jsch)]
	schemaCache.Unlock()
	if ok {
		return sch, true
	}
	sch, err := decodeSchema(jsch)
	if err != nil {
		return nil, false
	}
	schemaCache.Lock()
	if len(schemaCache.m) >= maxCachedSchemas {
		clear(schemaCache.m)
	}
	schemaCache.m[string(jsch)] = sch
	schemaCache.Unlock()
	return sch, true
}
