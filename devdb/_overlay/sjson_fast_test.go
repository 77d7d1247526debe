// Copyright 2021 FerretDB Inc.
//
// Added for docket's devdb: checks that the one-pass decoder (fast.go)
// decodes exactly what FerretDB's encoding/json decoder does, and that it
// takes the common shape itself. devdb builds with this file as
// internal/handler/sjson/fast_test.go of FerretDB v1.24.0
// (_overlay/workspace.sh); devdb's TestOverlayTests runs it.
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
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/FerretDB/FerretDB/internal/types"
)

// fastStrings are strings the fast decoder takes and strings it must
// leave to encoding/json (escapes, controls, non-ASCII, invalid UTF-8).
var fastStrings = []string{"", "available", "a b", `quote"d`, `back\slash`, "tab\there", "new\nline",
	"é", "日本", "\x00", "\xff\xfe", "</script>", "\u2028", "$s", "{}", "[1]", "-0", "null"}

// fastNumbers are edge values of each numeric type.
var (
	fastDoubles = []float64{0, math.Copysign(0, -1), 1.5, -2.25e-300, 5e-324, math.MaxFloat64, -math.MaxFloat64, 1e21, 123456789012345678}
	fastInt32s  = []int32{0, 1, -1, math.MaxInt32, math.MinInt32}
	fastInt64s  = []int64{0, -1, math.MaxInt64, math.MinInt64, 1 << 53}
)

// randomValue makes a value of any type sjson stores, nested to depth.
func randomValue(r *rand.Rand, depth int) any {
	switch n := r.IntN(15); {
	case n == 0 && depth > 0:
		return randomDocument(r, depth-1)
	case n == 1 && depth > 0:
		a := types.MakeArray(0)
		for range r.IntN(4) {
			a.Append(randomValue(r, depth-1))
		}
		return a
	case n == 2:
		return fastDoubles[r.IntN(len(fastDoubles))]
	case n == 3:
		return fastInt32s[r.IntN(len(fastInt32s))]
	case n == 4:
		return fastInt64s[r.IntN(len(fastInt64s))]
	case n == 5:
		return time.UnixMilli(r.Int64N(1<<45) - 1<<44).UTC()
	case n == 6:
		return types.Timestamp(r.Uint64())
	case n == 7:
		return r.IntN(2) == 0
	case n == 8:
		return types.Null
	case n == 9:
		var id types.ObjectID
		for i := range id {
			id[i] = byte(r.IntN(256))
		}
		return id
	case n == 10:
		return types.Binary{Subtype: types.BinarySubtype(r.IntN(9)), B: []byte(fastStrings[r.IntN(len(fastStrings))])}
	case n == 11:
		return types.Regex{Pattern: fastStrings[r.IntN(len(fastStrings))], Options: "i"}
	default:
		return fastStrings[r.IntN(len(fastStrings))]
	}
}

// randomDocument makes a document of up to 12 fields, some of them with
// keys that need escapes.
func randomDocument(r *rand.Rand, depth int) *types.Document {
	d := types.MakeDocument(0)
	keys := []string{"_id", "state", "queue", "runAt", "errors", "a.b", "é", "k k", "x1", "x2", "x3", "x4"}
	for range r.IntN(13) {
		d.Set(keys[r.IntN(len(keys))], randomValue(r, depth))
	}
	return d
}

// requireSameDecoding checks that the fast decoder, where it takes data,
// gives what encoding/json's decoder gives.
func requireSameDecoding(t *testing.T, data []byte) (fast bool) {
	t.Helper()
	want, werr := unmarshalDecoder(data)
	got, ok := unmarshalFast(data)
	if !ok {
		return false
	}
	require.NoError(t, werr, "the fast decoder took what encoding/json refuses: %s", data)
	require.Equal(t, want, got, "%s", data)
	return true
}

// TestUnmarshalFastMatchesDecoder decodes random documents of every type,
// as Marshal stores them and altered (spaces, a byte changed or dropped),
// with both decoders.
func TestUnmarshalFastMatchesDecoder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var took, altered int
	for range 3000 {
		doc := randomDocument(r, 3)
		data, err := Marshal(doc)
		require.NoError(t, err)
		if requireSameDecoding(t, data) {
			took++
		}
		for _, alt := range alterations(r, data) {
			if requireSameDecoding(t, alt) {
				altered++
			}
		}
	}
	require.Greater(t, took, 1000, "the fast decoder takes too few stored documents")
	require.Greater(t, altered, 100, "the alterations never reach the fast decoder")
}

// alterations are data with spaces added, one byte changed, one dropped,
// a field doubled.
func alterations(r *rand.Rand, data []byte) [][]byte {
	i := r.IntN(len(data))
	changed := bytes.Clone(data)
	changed[i] = `{}[]",:0-1e.tn \x`[r.IntN(17)]
	dropped := append(bytes.Clone(data[:i]), data[i+1:]...)
	spaced := []byte(strings.NewReplacer(",", " ,\n", ":", "\t: ").Replace(string(data)))
	doubled := bytes.Clone(data)
	if j := bytes.LastIndexByte(data, ','); j > 0 {
		doubled = append(append(bytes.Clone(data[:len(data)-1]), data[j:len(data)-1]...), '}')
	}
	return [][]byte{changed, dropped, spaced, doubled}
}

// TestUnmarshalFastOddInputs decodes hand-made documents that the fast
// decoder must decode as encoding/json does, or leave to it: keys twice
// (encoding/json keeps the last), another order, numbers outside JSON's
// grammar or their type's range, trailing bytes.
func TestUnmarshalFastOddInputs(t *testing.T) {
	const aa = `{"$s":{"p":{"a":{"t":"int"}},"$k":["a","a"]},`
	for _, data := range []string{
		aa + `"a":1,"a":2}`,
		`{"$s":{"p":{"a":{"t":"int"}},"$k":["a"]},"$s":{"p":{"a":{"t":"long"}},"$k":["a"]},"a":1}`,
		`{"$s":{"p":{"d":{"t":"object","$s":{"p":{"a":{"t":"int"}},"$k":["a","a"]}}},"$k":["d"]},"d":{"a":1,"a":2}}`,
		`{"$s":{"p":{"a":{"t":"int"},"b":{"t":"int"}},"$k":["a","b"]},"b":1,"a":2}`,
		`{"$s":{"p":{"a":{"t":"int"}},"$k":["a"]},"a":1} x`,
		`{"$s":{"p":{"a":{"t":"int"}},"$k":["a"]},"a":01}`,
		`{"$s":{"p":{"a":{"t":"int"}},"$k":["a"]},"a":1.0}`,
		`{"$s":{"p":{"a":{"t":"int"}},"$k":["a"]},"a":2147483648}`,
		`{"$s":{"p":{"a":{"t":"long"}},"$k":["a"]},"a":+1}`,
		`{"$s":{"p":{"a":{"t":"double"}},"$k":["a"]},"a":1e400}`,
		`{"$s":{"p":{"a":{"t":"double"}},"$k":["a"]},"a":0x10}`,
		`{"$s":{"p":{"a":{"t":"timestamp"}},"$k":["a"]},"a":-1}`,
		`{"$s":{"p":{"a":{"t":"string"}},"$k":["a"]},"a":"x\u0041"}`,
		`{"$s":{"p":{"a":{"t":"objectId"}},"$k":["a"]},"a":"0102"}`,
		`{"$s":{"p":{"a":{"t":"object","$s":{}}},"$k":["a"]},"a":{}}`,
		`{"$s":{"p":{"a":{"t":"array","i":[]}},"$k":["a"]},"a":[]}`,
		`{"$s":{"p":{"a":{"t":"array","i":[{"t":"int"}]}},"$k":["a"]},"a":[1,2]}`,
		` { "$s" : {"p":{"a":{"t":"bool"}},"$k":["a"]} , "a" : true } `,
		`{"$s":{"p":{"a":{"t":"bool"}},"$k":["a"]},"a":True}`,
		`{"$s":{"p":{"a":{"t":"string"}},"$k":["a"]},"a":null}`,
	} {
		requireSameDecoding(t, []byte(data))
	}
	require.True(t, requireSameDecoding(t, []byte(` { "$s" : {"p":{"a":{"t":"bool"}},"$k":["a"]} , "a" : true }`)))
}

// TestUnmarshalFastTakesAJob checks that a job's document, as docket
// stores it, is decoded by the fast decoder, not handed on.
func TestUnmarshalFastTakesAJob(t *testing.T) {
	id := types.ObjectID{1, 2, 3}
	errs := types.MakeArray(0)
	errs.Append(mustDocument("at", time.UnixMilli(1700000000000).UTC(), "error", "boom: exit status 1", "attempt", int32(1)))
	job := mustDocument("_id", id, "kind", "noop", "queue", "default", "state", "available",
		"priority", int32(0), "runAt", time.UnixMilli(1700000000123).UTC(), "attempt", int64(2),
		"args", mustDocument("n", 1.5, "tags", errs), "errors", errs, "leaseToken", types.Null)
	data, err := Marshal(job)
	require.NoError(t, err)
	require.True(t, requireSameDecoding(t, data), "a job's document went to encoding/json: %s", data)
}

// mustDocument is types.NewDocument for literals.
func mustDocument(pairs ...any) *types.Document {
	d, err := types.NewDocument(pairs...)
	if err != nil {
		panic(err)
	}
	return d
}
