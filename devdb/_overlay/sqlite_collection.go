// Copyright 2021 FerretDB Inc.
//
// Modified for docket's devdb: UpdateAll and DeleteAll find a document whose
// _id was stored from a string that was not UTF-8 (see idTexts), and
// UpdateAll keeps its statement prepared over commands (updateDocs); Query and
// Explain push down, through
// pushdownWhere (at the end of this file), an _id equality or $in and
// string equalities, $in of strings and $exists: true (exists.go) of
// top-level fields wherever they stand in the filter, not only a filter
// that is {_id} alone; and a
// find's or findAndModify's sort on top-level fields is applied here
// (QueryParams.SortKeys): from one of devdb's covering indexes when one
// serves (orderByIndex), else by reading the sort fields alone
// (querySorted). The original is
// internal/backends/sqlite/collection.go of FerretDB v1.24.0; devdb builds
// with this file in its place (_overlay/workspace.sh).
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
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	sqlite3 "modernc.org/sqlite"
	sqlite3lib "modernc.org/sqlite/lib"

	"github.com/FerretDB/FerretDB/internal/backends"
	"github.com/FerretDB/FerretDB/internal/backends/sqlite/metadata"
	"github.com/FerretDB/FerretDB/internal/handler/common"
	"github.com/FerretDB/FerretDB/internal/handler/sjson"
	"github.com/FerretDB/FerretDB/internal/types"
	"github.com/FerretDB/FerretDB/internal/util/fsql"
	"github.com/FerretDB/FerretDB/internal/util/iterator"
	"github.com/FerretDB/FerretDB/internal/util/lazyerrors"
	"github.com/FerretDB/FerretDB/internal/util/must"
)

// collection implements backends.Collection interface.
type collection struct {
	r      *metadata.Registry
	dbName string
	name   string
}

// newCollection creates a new Collection.
func newCollection(r *metadata.Registry, dbName, name string) backends.Collection {
	return backends.CollectionContract(&collection{
		r:      r,
		dbName: dbName,
		name:   name,
	})
}

// Query implements backends.Collection interface.
func (c *collection) Query(ctx context.Context, params *backends.QueryParams) (*backends.QueryResult, error) {
	db := c.r.DatabaseGetExisting(ctx, c.dbName)
	if db == nil {
		return &backends.QueryResult{
			Iter: newQueryIterator(ctx, nil, params.OnlyRecordIDs),
		}, nil
	}

	meta := c.r.CollectionGet(ctx, c.dbName, c.name)
	if meta == nil {
		return &backends.QueryResult{
			Iter: newQueryIterator(ctx, nil, params.OnlyRecordIDs),
		}, nil
	}

	q := prepareSelectClause(meta.TableName, params.Comment, meta.Capped(), params.OnlyRecordIDs)

	whereClause, args := pushdownWhere(params.Filter, presenceIndexed(ctx, db, meta.TableName, params.Filter))

	// A capped collection's too: its record id is its rowid, which the
	// sorted reads use (find sends no SortKeys for one: its default order
	// is the record id's).
	if params.SortKeys.Len() > 0 && !params.OnlyRecordIDs {
		if it, ok := orderByIndex(ctx, db, meta.TableName, params.Filter, params.SortKeys, params.Limit); ok {
			return &backends.QueryResult{Iter: it}, nil
		}
		return querySorted(ctx, db, meta.TableName, whereClause, args, params.SortKeys, params.Limit)
	}

	q += whereClause
	q += prepareOrderByClause(params.Sort)

	if params.Limit != 0 {
		q += ` LIMIT ?`
		args = append(args, params.Limit)
	}

	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, lazyerrors.Error(err)
	}

	return &backends.QueryResult{
		Iter: newQueryIterator(ctx, rows, params.OnlyRecordIDs),
	}, nil
}

// InsertAll implements backends.Collection interface.
func (c *collection) InsertAll(ctx context.Context, params *backends.InsertAllParams) (*backends.InsertAllResult, error) {
	if _, err := c.r.CollectionCreate(ctx, &metadata.CollectionCreateParams{DBName: c.dbName, Name: c.name}); err != nil {
		return nil, lazyerrors.Error(err)
	}

	db := c.r.DatabaseGetExisting(ctx, c.dbName)
	meta := c.r.CollectionGet(ctx, c.dbName, c.name)

	err := db.InTransaction(ctx, func(tx *fsql.Tx) error {
		batchSize := c.r.BatchSize
		if batchSize < 1 {
			panic("batch-size should be greater or equal to 1")
		}

		var batch []*types.Document
		docs := params.Docs

		for len(docs) > 0 {
			i := min(batchSize, len(docs))
			batch, docs = docs[:i], docs[i:]

			q, args, err := prepareInsertStatement(meta.TableName, meta.Capped(), batch)
			if err != nil {
				return lazyerrors.Error(err)
			}

			if _, err = tx.ExecContext(ctx, q, args...); err != nil {
				var se *sqlite3.Error
				if errors.As(err, &se) && se.Code() == sqlite3lib.SQLITE_CONSTRAINT_UNIQUE {
					return backends.NewError(backends.ErrorCodeInsertDuplicateID, err)
				}

				return lazyerrors.Error(err)
			}
		}

		return nil
	})
	if err != nil {
		return nil, err
	}

	return new(backends.InsertAllResult), nil
}

// UpdateAll implements backends.Collection interface.
func (c *collection) UpdateAll(ctx context.Context, params *backends.UpdateAllParams) (*backends.UpdateAllResult, error) {
	var res backends.UpdateAllResult
	db := c.r.DatabaseGetExisting(ctx, c.dbName)
	if db == nil {
		return &res, nil
	}

	meta := c.r.CollectionGet(ctx, c.dbName, c.name)
	if meta == nil {
		return &res, nil
	}

	q := fmt.Sprintf(`UPDATE %q SET %s = ? WHERE %s IN (?, ?)`, meta.TableName, metadata.DefaultColumn, metadata.IDColumn)

	err := db.InTransaction(ctx, func(tx *fsql.Tx) error {
		n, err := updateDocs(ctx, db, tx, q, params.Docs)
		res.Updated = n
		return err
	})
	if err != nil {
		return nil, lazyerrors.Error(err)
	}

	return &res, nil
}

// updateDocs writes each of docs by its _id with q, kept prepared over
// commands (fsql's PreparedIn: SQLite's parse of an update, which names
// every index of the table, cost as much as a command's write; a
// statement per document doubled a claim's stamp, one per command was a
// seventh of a chain's server time), and returns how many rows they
// changed.
func updateDocs(ctx context.Context, db *fsql.DB, tx *fsql.Tx, q string, docs []*types.Document) (int32, error) {
	stmt, err := db.PreparedIn(ctx, tx, q)
	if err != nil {
		return 0, lazyerrors.Error(err)
	}
	defer stmt.Close()

	var updated int32

	for _, doc := range docs {
		b, err := sjson.Marshal(doc)
		if err != nil {
			return updated, lazyerrors.Error(err)
		}

		id, _ := doc.Get("_id")
		must.NotBeZero(id)

		texts := idTexts(id)

		r, err := stmt.ExecContext(ctx, string(b), texts[0], texts[len(texts)-1])
		if err != nil {
			return updated, lazyerrors.Error(err)
		}

		ra, err := r.RowsAffected()
		if err != nil {
			return updated, lazyerrors.Error(err)
		}

		updated += int32(ra)
	}

	return updated, nil
}

// DeleteAll implements backends.Collection interface.
func (c *collection) DeleteAll(ctx context.Context, params *backends.DeleteAllParams) (*backends.DeleteAllResult, error) {
	db := c.r.DatabaseGetExisting(ctx, c.dbName)
	if db == nil {
		return &backends.DeleteAllResult{Deleted: 0}, nil
	}

	meta := c.r.CollectionGet(ctx, c.dbName, c.name)
	if meta == nil {
		return &backends.DeleteAllResult{Deleted: 0}, nil
	}

	// TODO https://github.com/FerretDB/FerretDB/issues/3888

	var column string
	var placeholders []string
	var args []any

	if params.RecordIDs == nil {
		for _, id := range params.IDs {
			for _, text := range idTexts(id) {
				placeholders = append(placeholders, "?")
				args = append(args, text)
			}
		}

		column = metadata.IDColumn
	} else {
		placeholders = make([]string, len(params.RecordIDs))
		args = make([]any, len(params.RecordIDs))

		for i, id := range params.RecordIDs {
			placeholders[i] = "?"
			args[i] = id
		}

		column = metadata.RecordIDColumn
	}

	q := fmt.Sprintf(`DELETE FROM %q WHERE %s IN (%s)`, meta.TableName, column, strings.Join(placeholders, ", "))

	res, err := db.ExecContext(ctx, q, args...)
	if err != nil {
		return nil, lazyerrors.Error(err)
	}

	ra, err := res.RowsAffected()
	if err != nil {
		return nil, lazyerrors.Error(err)
	}

	return &backends.DeleteAllResult{
		Deleted: int32(ra),
	}, nil
}

// Explain implements backends.Collection interface.
func (c *collection) Explain(ctx context.Context, params *backends.ExplainParams) (*backends.ExplainResult, error) {
	db := c.r.DatabaseGetExisting(ctx, c.dbName)
	if db == nil {
		return &backends.ExplainResult{
			QueryPlanner: must.NotFail(types.NewDocument()),
		}, nil
	}

	meta := c.r.CollectionGet(ctx, c.dbName, c.name)
	if meta == nil {
		return &backends.ExplainResult{
			QueryPlanner: must.NotFail(types.NewDocument()),
		}, nil
	}

	selectClause := prepareSelectClause(meta.TableName, "", meta.Capped(), false)

	whereClause, args := pushdownWhere(params.Filter, presenceIndexed(ctx, db, meta.TableName, params.Filter))
	filterPushdown := whereClause != ""

	orderByClause := prepareOrderByClause(params.Sort)
	sortPushdown := orderByClause != ""

	q := `EXPLAIN QUERY PLAN ` + selectClause + whereClause + orderByClause

	var limitPushdown bool

	if params.Limit != 0 {
		q += ` LIMIT ?`
		args = append(args, params.Limit)
		limitPushdown = true
	}

	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, lazyerrors.Error(err)
	}

	defer rows.Close()

	queryPlan, err := types.NewArray()
	if err != nil {
		return nil, lazyerrors.Error(err)
	}

	for rows.Next() {
		var id int32
		var parent int32
		var notused int32
		var detail string

		// SQLite query plan can be interpreted as a tree.
		// Each row of query plan represents a node of this tree,
		// it contains node id, parent id, auxiliary integer field, and a description.
		// See https://www.sqlite.org/eqp.html for further details.
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			return nil, lazyerrors.Error(err)
		}

		queryPlan.Append(fmt.Sprintf("id=%d parent=%d notused=%d detail=%s", id, parent, notused, detail))
	}

	return &backends.ExplainResult{
		QueryPlanner:   must.NotFail(types.NewDocument("Plan", queryPlan)),
		FilterPushdown: filterPushdown,
		SortPushdown:   sortPushdown,
		LimitPushdown:  limitPushdown,
	}, nil
}

// Stats implements backends.Collection interface.
func (c *collection) Stats(ctx context.Context, params *backends.CollectionStatsParams) (*backends.CollectionStatsResult, error) {
	db := c.r.DatabaseGetExisting(ctx, c.dbName)
	if db == nil {
		return nil, backends.NewError(
			backends.ErrorCodeCollectionDoesNotExist,
			lazyerrors.Errorf("no ns %s.%s", c.dbName, c.name),
		)
	}

	coll := c.r.CollectionGet(ctx, c.dbName, c.name)
	if coll == nil {
		return nil, backends.NewError(
			backends.ErrorCodeCollectionDoesNotExist,
			lazyerrors.Errorf("no ns %s.%s", c.dbName, c.name),
		)
	}
	stats, err := collectionsStats(ctx, db, []*metadata.Collection{coll}, params.Refresh)
	if err != nil {
		return nil, lazyerrors.Error(err)
	}

	placeholders := make([]string, 0, len(coll.Settings.Indexes))
	args := make([]any, 0, len(coll.Settings.Indexes))
	indexMap := map[string]string{}

	for _, index := range coll.Settings.Indexes {
		placeholders = append(placeholders, "?")
		args = append(args, coll.TableName+"_"+index.Name)
		indexMap[coll.TableName+"_"+index.Name] = index.Name
	}

	q := fmt.Sprintf(`
		SELECT
			name,
			pgsize
		FROM dbstat
		WHERE name IN (%s) AND aggregate = TRUE`,
		strings.Join(placeholders, ", "),
	)

	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, lazyerrors.Error(err)
	}

	defer rows.Close()

	indexSizes := make([]backends.IndexSize, len(indexMap))
	var i int

	for rows.Next() {
		var name string
		var size int64

		if err = rows.Scan(&name, &size); err != nil {
			return nil, lazyerrors.Error(err)
		}

		indexName, ok := indexMap[name]
		if !ok {
			// new index have been created since fetching metadata
			continue
		}

		indexSizes[i] = backends.IndexSize{
			Name: indexName,
			Size: size,
		}
		i++
	}

	if rows.Err() != nil {
		return nil, lazyerrors.Error(rows.Err())
	}

	return &backends.CollectionStatsResult{
		CountDocuments:  stats.countDocuments,
		SizeTotal:       stats.sizeTables + stats.sizeIndexes,
		SizeIndexes:     stats.sizeIndexes,
		SizeCollection:  stats.sizeTables,
		IndexSizes:      indexSizes,
		SizeFreeStorage: stats.sizeFreeStorage,
	}, nil
}

// Compact implements backends.Collection interface.
func (c *collection) Compact(ctx context.Context, params *backends.CompactParams) (*backends.CompactResult, error) {
	db := c.r.DatabaseGetExisting(ctx, c.dbName)
	if db == nil {
		return nil, backends.NewError(
			backends.ErrorCodeDatabaseDoesNotExist,
			lazyerrors.Errorf("no ns %s.%s", c.dbName, c.name),
		)
	}

	coll := c.r.CollectionGet(ctx, c.dbName, c.name)
	if coll == nil {
		return nil, backends.NewError(
			backends.ErrorCodeCollectionDoesNotExist,
			lazyerrors.Errorf("no ns %s.%s", c.dbName, c.name),
		)
	}

	q := `PRAGMA incremental_vacuum`
	if params != nil && params.Full {
		q = `VACUUM`
	}

	if _, err := db.ExecContext(ctx, q); err != nil {
		return nil, lazyerrors.Error(err)
	}

	return new(backends.CompactResult), nil
}

// ListIndexes implements backends.Collection interface.
func (c *collection) ListIndexes(ctx context.Context, params *backends.ListIndexesParams) (*backends.ListIndexesResult, error) {
	db := c.r.DatabaseGetExisting(ctx, c.dbName)
	if db == nil {
		return nil, backends.NewError(
			backends.ErrorCodeCollectionDoesNotExist,
			lazyerrors.Errorf("no ns %s.%s", c.dbName, c.name),
		)
	}

	coll := c.r.CollectionGet(ctx, c.dbName, c.name)
	if coll == nil {
		return nil, backends.NewError(
			backends.ErrorCodeCollectionDoesNotExist,
			lazyerrors.Errorf("no ns %s.%s", c.dbName, c.name),
		)
	}

	res := backends.ListIndexesResult{
		Indexes: make([]backends.IndexInfo, len(coll.Settings.Indexes)),
	}

	for i, index := range coll.Settings.Indexes {
		res.Indexes[i] = backends.IndexInfo{
			Name:   index.Name,
			Unique: index.Unique,
			Key:    make([]backends.IndexKeyPair, len(index.Key)),
		}

		for j, key := range index.Key {
			res.Indexes[i].Key[j] = backends.IndexKeyPair{
				Field:      key.Field,
				Descending: key.Descending,
			}
		}
	}

	sort.Slice(res.Indexes, func(i, j int) bool {
		return res.Indexes[i].Name < res.Indexes[j].Name
	})

	return &res, nil
}

// CreateIndexes implements backends.Collection interface.
func (c *collection) CreateIndexes(ctx context.Context, params *backends.CreateIndexesParams) (*backends.CreateIndexesResult, error) { //nolint:lll // for readability
	indexes := make([]metadata.IndexInfo, len(params.Indexes))
	for i, index := range params.Indexes {
		indexes[i] = metadata.IndexInfo{
			Name:   index.Name,
			Key:    make([]metadata.IndexKeyPair, len(index.Key)),
			Unique: index.Unique,
		}

		for j, key := range index.Key {
			indexes[i].Key[j] = metadata.IndexKeyPair{
				Field:      key.Field,
				Descending: key.Descending,
			}
		}
	}

	err := c.r.IndexesCreate(ctx, c.dbName, c.name, indexes)
	if err != nil {
		return nil, lazyerrors.Error(err)
	}

	return new(backends.CreateIndexesResult), nil
}

// DropIndexes implements backends.Collection interface.
func (c *collection) DropIndexes(ctx context.Context, params *backends.DropIndexesParams) (*backends.DropIndexesResult, error) {
	err := c.r.IndexesDrop(ctx, c.dbName, c.name, params.Indexes)
	if err != nil {
		return nil, lazyerrors.Error(err)
	}

	return new(backends.DropIndexesResult), nil
}

// check interfaces
var (
	_ backends.Collection = (*collection)(nil)
)

// pushdownWhere returns the WHERE clause, and its arguments, that selects
// from a collection's table a superset of the documents filter matches:
// every handler filters the rows again with the whole filter, so the
// clause only saves decoding the rows it leaves out. Empty: none (every
// row is read).
//
// It pushes down, from the top level of the filter:
//   - _id: X, and _id: {$in: [X, ...]}, X a string or an ObjectID: the
//     table's _id lookup (an _id is never an array), and nothing else;
//   - field: "s", for every other field with a plain name: the field's
//     value is that string, or an array (which may hold it);
//   - field: {$exists: true}: the field is present (presentCond).
//
// A string is pushed down only when its JSON text is the same whoever
// writes it (printable ASCII without " \ < > &), so that the comparison
// of JSON texts is exact. When steer is set (a field the filter requires
// present has a partial index of the documents that have it:
// presenceIndexed), the strings' conditions are written so that SQLite
// cannot take an index for them (a unary +, which changes no value), and
// it reads that partial index.
func pushdownWhere(filter *types.Document, steer bool) (string, []any) {
	if filter == nil {
		return "", nil
	}

	conds, args := idConds(filter)
	if len(conds) == 0 { // _id selects at most a few rows: nothing else needed
		conds, args = fieldConds(filter, steer)
	}

	if len(conds) == 0 {
		return "", nil
	}

	return ` WHERE ` + strings.Join(conds, ` AND `), args
}

// idConds returns the condition of filter's _id lookup, if pushdownWhere
// pushes it down, and its arguments.
func idConds(filter *types.Document) ([]string, []any) {
	v, err := filter.Get("_id")
	if err != nil {
		return nil, nil
	}

	if sqlValue(v) {
		return []string{fmt.Sprintf(`%s = ?`, metadata.IDColumn)}, []any{string(must.NotFail(sjson.MarshalSingleValue(v)))}
	}

	if in := idIn(v); len(in) > 0 {
		marks := strings.TrimSuffix(strings.Repeat("?, ", len(in)), ", ")
		return []string{fmt.Sprintf(`%s IN (%s)`, metadata.IDColumn, marks)}, in
	}

	return nil, nil
}

// fieldConds returns the conditions, and their arguments, that
// pushdownWhere pushes down for the fields of filter other than _id.
func fieldConds(filter *types.Document, steer bool) ([]string, []any) {
	var conds []string
	var args []any

	for _, k := range filter.Keys() {
		if k == "_id" || !metadata.PlainField(k) {
			continue
		}

		expr := fmt.Sprintf(`%s->'$.%s'`, metadata.DefaultColumn, k)
		v := must.NotFail(filter.Get(k))
		if existsTrue(v) {
			conds = append(conds, presentCond(k))
			continue
		}

		if s, ok := v.(string); ok && plainString(s) {
			conds = append(conds, fmt.Sprintf(`(%s = ? OR (%s >= '[' AND %s < '\'))`, expr, expr, expr))
			args = append(args, string(must.NotFail(sjson.MarshalSingleValue(s))))
			continue
		}

		// {k: {$in: [strings]}}: k equal to one of them, or an array
		// (which may hold one), as for an equality.
		if in := stringsIn(v); len(in) > 0 {
			if steer {
				// Not this index, but the present field's: an $in
				// (the due pass's finished states) selects many; an
				// equality (a dependent's after: id) may select few.
				expr = "+(" + expr + ")"
			}
			marks := strings.TrimSuffix(strings.Repeat("?, ", len(in)), ", ")
			conds = append(conds, fmt.Sprintf(`(%s IN (%s) OR (%s >= '[' AND %s < '\'))`, expr, marks, expr, expr))
			args = append(args, in...)
		}
	}

	return conds, args
}

// sqlValue reports whether v is an _id value pushdownWhere compares.
func sqlValue(v any) bool {
	switch v := v.(type) {
	case string:
		return plainString(v)
	case types.ObjectID:
		return true
	}

	return false
}

// idIn returns the JSON texts of the values of an _id filter {$in: [...]}
// whose values are all strings or ObjectIDs, or nil.
func idIn(v any) []any {
	d, ok := v.(*types.Document)
	if !ok || d.Len() != 1 {
		return nil
	}

	a, ok := must.NotFail(d.Get(d.Keys()[0])).(*types.Array)
	if !ok || d.Keys()[0] != "$in" || a.Len() == 0 || a.Len() > 500 {
		return nil
	}

	res := make([]any, 0, a.Len())
	for i := 0; i < a.Len(); i++ {
		e := must.NotFail(a.Get(i))
		if !sqlValue(e) {
			return nil
		}
		res = append(res, string(must.NotFail(sjson.MarshalSingleValue(e))))
	}

	return res
}

// stringsIn returns the JSON texts of the values of a filter {$in: [...]}
// whose values are all strings pushdownWhere compares, or nil.
func stringsIn(v any) []any {
	if _, ok := v.(string); ok {
		return nil // an equality, not $in
	}
	in := stringEqualities(v)
	for i, s := range in {
		if !plainString(s.(string)) {
			return nil
		}
		in[i] = string(must.NotFail(sjson.MarshalSingleValue(s)))
	}
	return in
}

// plainString reports whether s has one JSON text (see pushdownWhere).
func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}

	return true
}

// idTexts returns the JSON texts the _id id may be stored as: the one it
// marshals to, and, for a string holding U+FFFD, the same with each U+FFFD
// escaped. A string that was not UTF-8 when inserted is stored with its bad
// bytes as the escape \ufffd (encoding/json's way), and reads back holding
// U+FFFD, which marshals as itself: without the second text, the write of
// the updated document, by _id, would match no row, and the update would
// be reported done while nothing changed.
func idTexts(id any) []string {
	text := string(must.NotFail(sjson.MarshalSingleValue(id)))
	if s, ok := id.(string); ok && strings.ContainsRune(s, '\uFFFD') {
		return []string{text, strings.ReplaceAll(text, "\uFFFD", `\ufffd`)}
	}

	return []string{text}
}

// querySorted returns the documents of table that the WHERE clause where
// (with args) selects, in the order of the sort sortKeys, exactly as the
// handler's own sort orders them, for a find that stops at its limit:
// rather than decoding every selected document to sort them, it reads
// each row's rowid and its sort fields alone (their values and sjson
// types), decodes those small documents and sorts them with the handler's
// sort (common.SortDocuments: the same order for every type, arrays and
// missing fields included), then reads the whole documents in that order,
// a chunk at a time, as the handler pulls them (sortedIterator). The
// handler filters them exactly, and stops at its limit.
//
// The two reads are not one snapshot: a document changed between them is
// returned as it is at the second (and the handler filters it as such) in
// the place its sort fields had at the first; one deleted meanwhile is left
// out. A find on MongoDB does not read one snapshot either.
func querySorted(ctx context.Context, db *fsql.DB, table, where string, args []any, sortKeys *types.Document, limit int64) (*backends.QueryResult, error) {
	// One json_extract of every path, each value and its type, so that
	// SQLite parses each document once: it returns them as one JSON array,
	// null for a path that is missing (a field is missing when its type is).
	keys := sortKeys.Keys()
	paths := make([]string, 0, 2*len(keys))
	for _, k := range keys {
		paths = append(paths, fmt.Sprintf(`'$.%s'`, k), fmt.Sprintf(`'$."$s".p.%s'`, k))
	}
	q := fmt.Sprintf(`SELECT rowid, json_extract(%s, %s) FROM %q`, metadata.DefaultColumn, strings.Join(paths, ", "), table)

	rows, err := db.QueryContext(ctx, q+where, args...)
	if err != nil {
		return nil, lazyerrors.Error(err)
	}
	defer rows.Close()

	var minis []*types.Document
	rowids := map[*types.Document]int64{}
	var rowid int64
	var extracted []byte
	for rows.Next() {
		if err = rows.Scan(&rowid, &extracted); err != nil {
			return nil, lazyerrors.Error(err)
		}
		mini, err := sortFields(keys, extracted)
		if err != nil {
			return nil, err
		}
		minis = append(minis, mini)
		rowids[mini] = rowid
	}
	if err = rows.Err(); err != nil {
		return nil, lazyerrors.Error(err)
	}

	if err = common.SortDocuments(minis, sortKeys); err != nil {
		return nil, lazyerrors.Error(err)
	}

	order := make([]int64, len(minis))
	for i, m := range minis {
		order[i] = rowids[m]
	}

	return &backends.QueryResult{
		Iter: &sortedIterator{ctx: ctx, db: db, table: table, order: order, chunk: sortedChunk(limit)},
	}, nil
}

// sortFields makes the document of the sort fields of keys from
// extracted, querySorted's JSON array of each key's value and type (null
// for a missing one), in FerretDB's stored form, for its sort.
func sortFields(keys []string, extracted []byte) (*types.Document, error) {
	var parts []json.RawMessage
	if err := json.Unmarshal(extracted, &parts); err != nil || len(parts) != 2*len(keys) {
		return nil, lazyerrors.Errorf("sorted query: extracted %q: %v", extracted, err)
	}
	vals := make([]sql.NullString, len(parts))
	for i, p := range parts {
		vals[i] = sql.NullString{String: string(p), Valid: string(p) != "null"}
	}
	var typs, names, values strings.Builder
	for i, k := range keys {
		v, t := vals[2*i], vals[2*i+1]
		if t.Valid && !v.Valid {
			v = sql.NullString{String: "null", Valid: true} // a null value is a value when its type is there
		}
		if !v.Valid || !t.Valid {
			continue // missing
		}
		if typs.Len() > 0 {
			typs.WriteByte(',')
			names.WriteByte(',')
		}
		typs.WriteString(strconv.Quote(k) + ":" + t.String)
		names.WriteString(strconv.Quote(k))
		values.WriteString("," + strconv.Quote(k) + ":" + v.String)
	}
	doc := `{"$s":{"p":{` + typs.String() + `},"$k":[` + names.String() + `]}` + values.String() + `}`
	mini, err := sjson.Unmarshal([]byte(doc))
	if err != nil {
		return nil, lazyerrors.Error(err)
	}
	return mini, nil
}

// sortedChunk is how many documents a sortedIterator reads at once for a
// find stopping at limit.
func sortedChunk(limit int64) int { return int(min(max(limit, 16), 1000)) }

// Covering indexes (devdb's idindex.go): for each of a collection's
// indexes on two or more top-level fields k1, k2, ..., devdb adds the
// SQLite index "<table>__devdb_s_k1,k2,..." (a descending key written
// "-k") on, for each key in its direction, the rank of its BSON type and
// the field's SQL value:
//
//	CASE _ferretdb_sjson->>'$."$s".p.k.t' ... END, _ferretdb_sjson->>'$.k'
//
// Every column of such an index is an expression of _ferretdb_sjson that
// SQLite reads from the index itself (->> returns no JSON subtype, so
// SQLite may use the indexed value for the expression): a query that
// names no other expression reads no row and parses no JSON. Beside it,
// the partial index "<table>__devdb_o_k1,k2,..." holds only the documents
// with a key of a type outside coveringOrdered.
const (
	coveringInfix = "__devdb_s_"
	oddInfix      = "__devdb_o_"
)

// coveringValue and coveringType are a key's value and sjson type (%s:
// the field's name); coveringRank is the place of its type (%s: the type
// expression) in BSON's order of types: null and missing 1, numbers 2,
// strings 3, objects 4, arrays 5, binary 6, ObjectIDs 7, booleans 8,
// dates 9, timestamps 10, regexes 11. Within the types coveringOrdered
// lists, SQL orders the values as BSON does: numbers by value (SQLite
// compares integers and reals exactly), strings bytewise (SQLite's BINARY
// collation), ObjectIDs by their lowercase hex (their bytes' order),
// booleans as 0 and 1, dates as milliseconds; a sort over any other type
// is left to querySorted.
const (
	coveringValue = `_ferretdb_sjson->>'$.%s'`
	coveringType  = `_ferretdb_sjson->>'$."$s".p.%s.t'`
	coveringRank  = `CASE coalesce(%s, 'null') WHEN 'null' THEN 1 WHEN 'int' THEN 2 WHEN 'long' THEN 2 WHEN 'double' THEN 2 ` +
		`WHEN 'string' THEN 3 WHEN 'object' THEN 4 WHEN 'array' THEN 5 WHEN 'binData' THEN 6 WHEN 'objectId' THEN 7 ` +
		`WHEN 'bool' THEN 8 WHEN 'date' THEN 9 WHEN 'timestamp' THEN 10 WHEN 'regex' THEN 11 ELSE 99 END`
	coveringOrdered = `1, 2, 3, 7, 8, 9`
	// coveringUnordered are the other ranks, which a walk seeks.
	coveringUnordered = `4, 5, 6, 10, 11, 99`
	rankString        = 3
	rankArray         = 5
	// maxWalks bounds the walks of one sorted read: one per combination
	// of the strings the filter sets the keys before the sort's to.
	maxWalks = 64
)

func coveringValueOf(k string) string { return fmt.Sprintf(coveringValue, k) }

func coveringRankOf(k string) string { return fmt.Sprintf(coveringRank, fmt.Sprintf(coveringType, k)) }

// sortedRead is a query of rowids in a sort's order, and its arguments
// for a read of the first to of them. Its rows are a rowid and whether
// the document has a sort key of a type the index does not order.
type sortedRead struct {
	q    string
	args func(to int) []any
}

// orderByIndex returns an iterator of table's documents that may match
// filter, in the order of the sort sortKeys, when one of the table's
// covering indexes (above) can order them alone: it holds every sort key,
// and it leads with a field the filter sets equal to a string or to one
// of strings ({k1: "s"} or {k1: {$in: [...]}}). For a find stopping at
// limit it reads at least sortedWindow(limit) rowids, and more, a window
// twice as wide, when the handler's exact filter leaves too few of them.
//
// When the filter sets every key before the sort's to strings, the sort
// is the index's next keys in its directions (or all reversed), and no
// document has a key of a type the index does not order (the partial
// index of those is empty), SQLite walks the index in order from each
// combination of those strings and stops at the window: its cost does not
// grow with the matches (walkRead). Otherwise SQLite seeks the index to
// the filter's values of k1, applies the other string equalities of the
// index's keys to the index's entries, and keeps the first of them in sort
// order, a top-N sort of every match (scanRead). ok is false, and
// querySorted does the work, when no index serves, when a document has k1
// as an array (it may hold the value: the seek would miss it), or when a
// document whose entry matches has a sort key of a type the index does
// not order (an array, an object, ...): the top-N sort puts those first,
// so one look at the first says.
//
// As with querySorted, the reads are not one snapshot: a later window
// skips the rowids an earlier one returned, and may miss a document whose
// sort keys moved it into the part already read meanwhile (a find on
// MongoDB may miss such a document too).
func orderByIndex(ctx context.Context, db *fsql.DB, table string, filter, sortKeys *types.Document, limit int64) (*sortedIterator, bool) {
	if filter == nil || filter.Has("_id") {
		return nil, false // a lookup by _id: querySorted reads those few rows
	}
	index, keys, odd := coveringIndex(ctx, db, table, filter, sortKeys)
	if index == "" {
		return nil, false
	}
	read, ok := walkRead(ctx, db, table, index, keys, odd, filter, sortKeys)
	if !ok {
		if read, ok = scanRead(ctx, db, table, index, keys, filter, sortKeys); !ok {
			return nil, false
		}
	}

	// window reads the rowids in places [from, to) of the order, less
	// those seen; ok is false when a document is of a type the index does
	// not order.
	seen := map[int64]bool{}
	window := func(from, to int) (rowids []int64, full, ok bool, err error) {
		rows, err := db.QueryPreparedContext(ctx, read.q, read.args(to)...)
		if err != nil {
			return nil, false, false, lazyerrors.Error(err)
		}
		defer rows.Close()
		i := 0
		for ; rows.Next(); i++ {
			var rowid int64
			var other bool
			if err = rows.Scan(&rowid, &other); err != nil {
				return nil, false, false, lazyerrors.Error(err)
			}
			if other {
				return nil, false, false, nil
			}
			if i >= from && !seen[rowid] {
				seen[rowid] = true
				rowids = append(rowids, rowid)
			}
		}
		if err = rows.Err(); err != nil {
			return nil, false, false, lazyerrors.Error(err)
		}
		return rowids, i == to, true, nil
	}

	size := sortedWindow(limit)
	first, full, ok, err := window(0, size)
	if err != nil || !ok {
		return nil, false
	}
	it := &sortedIterator{ctx: ctx, db: db, table: table, order: first, chunk: sortedChunk(limit)}
	if full {
		read := size
		it.more = func() ([]int64, bool, error) {
			size = 2 * read
			next, full, ok, err := window(read, size)
			if err == nil && !ok {
				err = lazyerrors.New("sorted query: a document changed to a type the index does not order")
			}
			read = size
			return next, full, err
		}
	}

	return it, true
}

// coveringIndex returns the name and keys (a descending one as "-k") of
// the first of table's covering indexes that serves a find with filter
// sorted by sortKeys, and the name of its partial index of odd documents
// when table has it; index is "" when none serves.
func coveringIndex(ctx context.Context, db *fsql.DB, table string, filter, sortKeys *types.Document) (index string, keys []string, odd string) {
	// Run at every sorted read: kept prepared (SQLite prepares it again
	// itself when the schema changes).
	rows, err := db.QueryPreparedContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?`, table)
	if err != nil {
		return "", nil, ""
	}
	names := map[string]bool{}
	for rows.Next() {
		var name string
		if rows.Scan(&name) != nil {
			break
		}
		names[name] = true
		ks := strings.Split(strings.TrimPrefix(name, table+coveringInfix), ",")
		if index == "" && strings.HasPrefix(name, table+coveringInfix) && coveringServes(keyNames(ks), filter, sortKeys) {
			index, keys = name, ks
		}
	}
	if rows.Err() != nil || rows.Close() != nil || index == "" {
		return "", nil, ""
	}
	if o := table + oddInfix + strings.Join(keys, ","); names[o] {
		odd = o
	}
	return index, keys, odd
}

// keyNames returns keys without their direction.
func keyNames(keys []string) []string {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = strings.TrimPrefix(k, "-")
	}
	return names
}

// walkRead returns the read that walks the covering index (see
// orderByIndex), or false when it cannot. Each walk is a query with every
// key before the sort's set equal to one combination of the filter's
// strings, ordered as the index is (or all reversed), so that SQLite
// reads the index's entries in order and stops at the limit; the walks'
// rows are merged by the sort, then by rowid. Only while no document the
// walks may reach has a key the walk would misplace (walkable).
func walkRead(ctx context.Context, db *fsql.DB, table, index string, keys []string, odd string, filter, sortKeys *types.Document) (sortedRead, bool) {
	names := keyNames(keys)
	sorted := sortKeys.Keys()
	// A sort that leaves ties must run to the index's end, whose entries
	// SQLite orders by rowid last (the merge does too): a later window
	// then reads the ties in the order the first did.
	p := slices.Index(names, sorted[0])
	if p < 1 || p+len(sorted) > len(names) || !slices.Equal(names[p:p+len(sorted)], sorted) ||
		(sorted[len(sorted)-1] != "_id" && p+len(sorted) != len(names)) {
		return sortedRead{}, false
	}
	reversed, ok := walkDirection(keys[p:], sortKeys)
	if !ok {
		return sortedRead{}, false
	}
	combos, ok := stringCombos(filter, names[:p])
	if !ok {
		return sortedRead{}, false
	}
	later := slices.DeleteFunc(slices.Clone(sorted[1:]), func(k string) bool { return k == "_id" })
	if !walkable(ctx, db, table, index, names, p, combos, odd, later) {
		return sortedRead{}, false
	}

	var eqs, cols, order, unordered []string
	for _, k := range names[:p] {
		eqs = append(eqs, fmt.Sprintf(`%s = ? AND %s = %d`, coveringValueOf(k), coveringRankOf(k), rankString))
	}
	for i, k := range sorted {
		dir := ""
		if must.NotFail(sortKeys.Get(k)).(int64) < 0 {
			dir = " DESC"
		}
		cols = append(cols, fmt.Sprintf(`%s AS s%d, %s AS s%d`, coveringRankOf(k), 2*i, coveringValueOf(k), 2*i+1))
		order = append(order, fmt.Sprintf(`s%d%s, s%d%s`, 2*i, dir, 2*i+1, dir))
		unordered = append(unordered, fmt.Sprintf(`s%d NOT IN (%s)`, 2*i, coveringOrdered))
	}
	walk := fmt.Sprintf(`SELECT * FROM (SELECT rowid AS rid, %s FROM %q INDEXED BY %q WHERE %s ORDER BY %s LIMIT ?)`,
		strings.Join(cols, ", "), table, index, strings.Join(eqs, " AND "), strings.Join(order, ", "))
	walks := strings.TrimSuffix(strings.Repeat(walk+" UNION ALL ", len(combos)), " UNION ALL ")
	rid := "rid"
	if reversed {
		rid = "rid DESC"
	}
	q := fmt.Sprintf(`SELECT rid, (%s) FROM (%s) ORDER BY %s, %s LIMIT ?`,
		strings.Join(unordered, " OR "), walks, strings.Join(order, ", "), rid)

	return sortedRead{q: q, args: func(to int) []any {
		var args []any
		for _, c := range combos {
			args = append(append(args, c...), to)
		}
		return append(args, to)
	}}, true
}

// walkDirection reports whether the sort sortKeys walks the index keys
// (their first len(sortKeys), a descending one written "-k") backwards,
// and false when it follows neither their directions nor all of them
// reversed.
func walkDirection(keys []string, sortKeys *types.Document) (reversed, ok bool) {
	for i, k := range sortKeys.Keys() {
		against := (must.NotFail(sortKeys.Get(k)).(int64) < 0) != strings.HasPrefix(keys[i], "-")
		if i == 0 {
			reversed = against
		}
		if against != reversed {
			return false, false
		}
	}
	return reversed, true
}

// stringCombos returns every combination of the strings filter sets the
// keys names to, one value per key in order, and false when it sets one
// to anything else or the combinations pass maxWalks.
func stringCombos(filter *types.Document, names []string) ([][]any, bool) {
	combos := [][]any{{}}
	for _, k := range names {
		if !filter.Has(k) {
			return nil, false
		}
		in := stringEqualities(must.NotFail(filter.Get(k)))
		if in == nil || len(combos)*len(in) > maxWalks {
			return nil, false
		}
		next := make([][]any, 0, len(combos)*len(in))
		for _, c := range combos {
			for _, v := range in {
				next = append(next, append(slices.Clone(c), v))
			}
		}
		combos = next
	}
	return combos, true
}

// walkable reports whether no document the walks from combos of the keys
// names[:p] may reach would be misplaced or missed: one holding an array
// in one of those keys (an array holding one of the strings matches the
// filter), or a value of a type SQL does not order as BSON does in a sort
// key (an array sorts by its least or greatest element, not where its
// type's rank puts it; objects are in their place, but not in order).
// Each of the first is a seek of the index (a key's rank follows the keys
// before it), the first sort key's too; a later sort key other than _id
// (never an array), when later, is one of the partial index odd's keys,
// and odd must be empty.
func walkable(ctx context.Context, db *fsql.DB, table, index string, names []string, p int, combos [][]any, odd string, later []string) bool {
	var seeks []string
	var args []any
	for i := 0; i <= p; i++ {
		seen := map[string]bool{}
		for _, c := range combos {
			key := fmt.Sprintf("%q", c[:i])
			if seen[key] {
				continue
			}
			seen[key] = true
			var conds []string
			for _, k := range names[:i] {
				conds = append(conds, fmt.Sprintf(`%s = ? AND %s = %d`, coveringValueOf(k), coveringRankOf(k), rankString))
			}
			if i < p {
				conds = append(conds, fmt.Sprintf(`%s = %d`, coveringRankOf(names[i]), rankArray))
			} else {
				conds = append(conds, fmt.Sprintf(`%s IN (%s)`, coveringRankOf(names[i]), coveringUnordered))
			}
			seeks = append(seeks, fmt.Sprintf(`SELECT 1 FROM %q INDEXED BY %q WHERE %s`, table, index, strings.Join(conds, " AND ")))
			args = append(args, c[:i]...)
		}
	}
	if len(later) > 0 {
		oddKeys := oddKeys(names)
		if odd == "" || slices.ContainsFunc(later, func(k string) bool { return !slices.Contains(oddKeys, k) }) {
			return false
		}
		seeks = append(seeks, fmt.Sprintf(`SELECT 1 FROM %q INDEXED BY %q WHERE %s`, table, odd, oddWhere(oddKeys)))
	}
	rows, err := db.QueryPreparedContext(ctx, fmt.Sprintf(`%s LIMIT 1`, strings.Join(seeks, " UNION ALL ")), args...)
	if err != nil {
		return false
	}
	found := rows.Next()
	return rows.Close() == nil && rows.Err() == nil && !found
}

// oddKeys and oddWhere are the keys and the condition of the partial
// index of the documents with a value of a type outside coveringOrdered in
// one of the covering index's later keys (devdb's idindex.go writes the
// same): all but the first three and _id, which a walk with two keys set
// by the filter or more can sort by after its first sort key.
func oddKeys(keys []string) []string {
	var odd []string
	for _, k := range keys[min(3, len(keys)):] {
		if k = strings.TrimPrefix(k, "-"); k != "_id" {
			odd = append(odd, k)
		}
	}
	return odd
}

func oddWhere(keys []string) string {
	conds := make([]string, len(keys))
	for i, k := range keys {
		conds[i] = fmt.Sprintf(`%s NOT IN (%s)`, coveringRankOf(k), coveringOrdered)
	}
	return "(" + strings.Join(conds, " OR ") + ")"
}

// scanRead returns the read that keeps the first of every match in sort
// order (see orderByIndex), or false when a document has k1 as an array.
func scanRead(ctx context.Context, db *fsql.DB, table, index string, keys []string, filter, sortKeys *types.Document) (sortedRead, bool) {
	names := keyNames(keys)

	// An array k1 (sjson stores its JSON text, '[...]') may hold the
	// value; the seek on k1's value finds only the strings.
	k1 := names[0]
	var n int
	err := db.QueryRowContext(ctx, fmt.Sprintf(`SELECT count(*) FROM (SELECT 1 FROM %q INDEXED BY %q WHERE %s >= '[' AND %s < '\' AND %s = %d LIMIT 1)`,
		table, index, coveringValueOf(k1), coveringValueOf(k1), coveringRankOf(k1), rankArray)).Scan(&n)
	if err != nil || n > 0 {
		return sortedRead{}, false
	}

	var conds []string
	var args []any
	for i, k := range names {
		if !filter.Has(k) {
			continue
		}
		in := stringEqualities(must.NotFail(filter.Get(k)))
		if in == nil {
			continue
		}
		marks := strings.TrimSuffix(strings.Repeat("?, ", len(in)), ", ")
		cond := fmt.Sprintf(`%s IN (%s) AND %s = %d`, coveringValueOf(k), marks, coveringRankOf(k), rankString)
		if i > 0 {
			cond = fmt.Sprintf(`((%s) OR %s = %d)`, cond, coveringRankOf(k), rankArray)
		}
		conds = append(conds, cond)
		args = append(args, in...)
	}

	// The documents with a sort key of a type the index does not order
	// come first (unordered: 1), the others in sort order.
	var order, unordered []string
	for _, k := range sortKeys.Keys() {
		dir := ""
		if must.NotFail(sortKeys.Get(k)).(int64) < 0 {
			dir = " DESC"
		}
		order = append(order, coveringRankOf(k)+dir, coveringValueOf(k)+dir)
		unordered = append(unordered, fmt.Sprintf(`%s NOT IN (%s)`, coveringRankOf(k), coveringOrdered))
	}
	q := fmt.Sprintf(`SELECT rowid, (%[1]s) FROM %[2]q INDEXED BY %[3]q WHERE %[4]s ORDER BY (%[1]s) DESC, %[5]s LIMIT ?`,
		strings.Join(unordered, " OR "), table, index, strings.Join(conds, " AND "), strings.Join(order, ", "))
	return sortedRead{q: q, args: func(to int) []any { return append(slices.Clone(args), to) }}, true
}

// sortedWindow is how many rowids in sort order orderByIndex reads first
// for a find stopping at limit: the handler's filter may leave out some.
func sortedWindow(limit int64) int { return int(min(max(2*limit, 256), 100_000)) }

// coveringServes reports whether the covering index on keys serves a find
// with filter sorted by sortKeys (see orderByIndex).
func coveringServes(keys []string, filter, sortKeys *types.Document) bool {
	if len(keys) < 2 || !filter.Has(keys[0]) || stringEqualities(must.NotFail(filter.Get(keys[0]))) == nil {
		return false
	}
	for _, k := range keys {
		if !metadata.PlainField(k) {
			return false
		}
	}
	for _, k := range sortKeys.Keys() {
		if !slices.Contains(keys, k) {
			return false
		}
		if _, ok := must.NotFail(sortKeys.Get(k)).(int64); !ok {
			return false
		}
	}
	return true
}

// stringEqualities returns the strings a filter's value v sets a field
// equal to, "s" or {$in: ["s", ...]} (at most 500), or nil.
func stringEqualities(v any) []any {
	if s, ok := v.(string); ok {
		return []any{s}
	}
	d, ok := v.(*types.Document)
	if !ok || d.Len() != 1 || d.Keys()[0] != "$in" {
		return nil
	}
	a, ok := must.NotFail(d.Get("$in")).(*types.Array)
	if !ok || a.Len() == 0 || a.Len() > 500 {
		return nil
	}
	res := make([]any, 0, a.Len())
	for i := 0; i < a.Len(); i++ {
		s, ok := must.NotFail(a.Get(i)).(string)
		if !ok {
			return nil
		}
		res = append(res, s)
	}
	return res
}

// sortedIterator returns the documents of table with the rowids of order,
// in that order, reading them chunk at a time; it skips those deleted since.
type sortedIterator struct {
	m     sync.Mutex
	ctx   context.Context
	db    *fsql.DB
	table string
	order []int64
	chunk int
	buf   []*types.Document
	done  bool
	// more, when set, returns the rowids that follow order once it is
	// read, and whether more may follow them (orderByIndex).
	more func() ([]int64, bool, error)
}

// Next implements iterator.Interface.
func (it *sortedIterator) Next() (struct{}, *types.Document, error) {
	it.m.Lock()
	defer it.m.Unlock()

	var unused struct{}
	for len(it.buf) == 0 {
		for len(it.order) == 0 && !it.done && it.more != nil {
			next, more, err := it.more()
			if err != nil {
				it.done = true
				return unused, nil, lazyerrors.Error(err)
			}
			it.order = next
			if !more {
				it.more = nil
			}
		}
		if it.done || len(it.order) == 0 {
			it.done = true
			return unused, nil, iterator.ErrIteratorDone
		}
		if err := context.Cause(it.ctx); err != nil {
			it.done = true
			return unused, nil, lazyerrors.Error(err)
		}

		ids := it.order[:min(it.chunk, len(it.order))]
		it.order = it.order[len(ids):]

		marks := strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", ")
		args := make([]any, len(ids))
		for i, id := range ids {
			args[i] = id
		}
		q := fmt.Sprintf(`SELECT rowid, %s FROM %q WHERE rowid IN (%s)`, metadata.DefaultColumn, it.table, marks)
		rows, err := it.db.QueryContext(it.ctx, q, args...)
		if err != nil {
			it.done = true
			return unused, nil, lazyerrors.Error(err)
		}

		got := make(map[int64]*types.Document, len(ids))
		for rows.Next() {
			var rowid int64
			var text []byte
			if err = rows.Scan(&rowid, &text); err != nil {
				break
			}
			var doc *types.Document
			if doc, err = sjson.Unmarshal(text); err != nil {
				break
			}
			got[rowid] = doc
		}
		if err == nil {
			err = rows.Err()
		}
		rows.Close()
		if err != nil {
			it.done = true
			return unused, nil, lazyerrors.Error(err)
		}

		for _, id := range ids {
			if d, ok := got[id]; ok {
				it.buf = append(it.buf, d)
			}
		}
	}

	d := it.buf[0]
	it.buf = it.buf[1:]
	return unused, d, nil
}

// Close implements iterator.Interface.
func (it *sortedIterator) Close() {
	it.m.Lock()
	defer it.m.Unlock()
	it.done, it.buf, it.order, it.more = true, nil, nil, nil
}
