// Added for docket's devdb: the pushdown of {field: {$exists: true}}
// (pushdownWhere in collection.go), as internal/backends/sqlite/exists.go
// of FerretDB v1.24.0 (_overlay/workspace.sh puts it there).
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

package sqlite

import (
	"context"
	"fmt"
	"strings"

	"github.com/FerretDB/FerretDB/internal/backends/sqlite/metadata"
	"github.com/FerretDB/FerretDB/internal/types"
	"github.com/FerretDB/FerretDB/internal/util/fsql"
	"github.com/FerretDB/FerretDB/internal/util/must"
)

// presentCond is the condition that field (a plain name) is present in a
// document: MongoDB's {field: {$exists: true}}, whatever the value, null
// included. A document is stored as a JSON object with a member per field,
// its value's JSON (null for null); -> returns the member's JSON text
// ('null' for null: not SQL NULL), and SQL NULL only when there is no such
// member. It is the very condition of the partial index that devdb makes
// of a field its collection's indexes start with (devdb/idindex.go), so
// that SQLite can read that index for it.
func presentCond(field string) string {
	return fmt.Sprintf(`%s->'$.%s' IS NOT NULL`, metadata.DefaultColumn, field)
}

// existsTrue reports whether the filter value v is {$exists: true} and
// nothing else (another operator beside it is left to the handler).
func existsTrue(v any) bool {
	d, ok := v.(*types.Document)
	if !ok || d.Len() != 1 || d.Keys()[0] != "$exists" {
		return false
	}

	b, ok := must.NotFail(d.Get("$exists")).(bool)

	return ok && b
}

// presenceIndexed reports whether table has, for one of the fields that
// filter requires present ({field: {$exists: true}}, pushed down by
// pushdownWhere), an index on the field whose rows are the documents that
// have it (WHERE presentCond): pushdownWhere then steers SQLite to it.
// Without statistics SQLite prefers an index on a string equality or $in
// (a claim's state), which for docket's due pass, {dependentsDue: {$exists:
// true}, state: {$in: [finished states]}}, reads every finished job to
// find the few flagged; the index of the flagged holds only those. A
// filter that pushdownWhere pushes down by _id, or that has no such field,
// costs no read.
func presenceIndexed(ctx context.Context, db *fsql.DB, table string, filter *types.Document) bool {
	if filter == nil {
		return false
	}
	if conds, _ := idConds(filter); len(conds) > 0 {
		return false
	}

	var present []string
	for _, k := range filter.Keys() {
		if k != "_id" && metadata.PlainField(k) && existsTrue(must.NotFail(filter.Get(k))) {
			present = append(present, k)
		}
	}
	if len(present) == 0 {
		return false
	}

	// Kept prepared, as coveringIndex's read of the same.
	rows, err := db.QueryPreparedContext(ctx, `SELECT coalesce(sql, '') FROM sqlite_master WHERE type = 'index' AND tbl_name = ?`, table)
	if err != nil {
		return false
	}
	defer rows.Close()

	for rows.Next() {
		var def string
		if rows.Scan(&def) != nil {
			return false
		}
		for _, k := range present {
			if presenceIndex(def, k) {
				return true
			}
		}
	}

	return false
}

// presenceIndex reports whether def, an index's CREATE INDEX statement,
// makes an index whose first key is field's lookup expression and whose
// rows are the documents that have field: ... (expr[ DESC][, ...]) WHERE
// presentCond(field).
func presenceIndex(def, field string) bool {
	open := strings.IndexByte(def, '(')
	if open < 0 || !strings.HasSuffix(def, ") WHERE "+presentCond(field)) {
		return false
	}

	rest, ok := strings.CutPrefix(def[open+1:], fmt.Sprintf(`%s->'$.%s'`, metadata.DefaultColumn, field))

	return ok && (strings.HasPrefix(rest, ")") || strings.HasPrefix(rest, ",") || strings.HasPrefix(rest, " DESC"))
}
