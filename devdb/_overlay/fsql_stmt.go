// Added for docket's devdb as internal/util/fsql/stmt.go of FerretDB
// v1.24.0 (_overlay/workspace.sh): DB keeps the statements of the queries
// its callers run often prepared, so that SQLite parses each once. devdb's
// sorted reads (orderByIndex in sqlite_collection.go) are long queries,
// run at every claim, whose parse was a seventh of devdb's time.
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

package fsql

import (
	"context"
	"database/sql"
	"sync"
)

// stmtCacheSize bounds the statements kept prepared, over every DB: past
// it, they are all closed and the cache begins again (the statements of a
// database dropped since go then too).
const stmtCacheSize = 256

// stmts holds the prepared statements, by DB and query.
var stmts = struct {
	sync.Mutex
	m map[stmtKey]*sql.Stmt
}{m: map[stmtKey]*sql.Stmt{}}

type stmtKey struct {
	db    *DB
	query string
}

// QueryPreparedContext is QueryContext with query prepared once and kept:
// for a query run often whose text is long. A statement that fails (an
// index it names may have gone; the cache may have closed it meanwhile)
// is dropped, and the query run again unprepared.
func (db *DB) QueryPreparedContext(ctx context.Context, query string, args ...any) (*Rows, error) {
	st, err := db.prepared(ctx, query)
	if err == nil {
		rows, err := st.QueryContext(ctx, args...)
		if err == nil {
			return wrapRows(rows), nil
		}
		db.forget(query, st)
	}
	return db.QueryContext(ctx, query, args...)
}

func (db *DB) prepared(ctx context.Context, query string) (*sql.Stmt, error) {
	stmts.Lock()
	defer stmts.Unlock()
	k := stmtKey{db, query}
	if st, ok := stmts.m[k]; ok {
		return st, nil
	}
	st, err := db.sqlDB.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if len(stmts.m) >= stmtCacheSize {
		for k, old := range stmts.m {
			_ = old.Close()
			delete(stmts.m, k)
		}
	}
	stmts.m[k] = st
	return st, nil
}

// PreparedIn returns the statement of query, prepared once and kept as
// QueryPreparedContext's are, for use in tx: a write that SQLite parses
// at each command (an update's statement names the table's indexes, whose
// expressions make its parse cost more than the write of a document).
// The caller closes it; should it fail, it calls Forget.
func (db *DB) PreparedIn(ctx context.Context, tx *Tx, query string) (*sql.Stmt, error) {
	st, err := db.prepared(ctx, query)
	if err != nil {
		return nil, err
	}
	return tx.sqlTx.StmtContext(ctx, st), nil
}

// Forget drops the statement of query kept by PreparedIn, so that the
// next use prepares it again.
func (db *DB) Forget(query string) {
	stmts.Lock()
	st := stmts.m[stmtKey{db, query}]
	stmts.Unlock()
	if st != nil {
		db.forget(query, st)
	}
}

// forget closes st and drops it, if it is still query's.
func (db *DB) forget(query string, st *sql.Stmt) {
	stmts.Lock()
	defer stmts.Unlock()
	k := stmtKey{db, query}
	if stmts.m[k] == st {
		delete(stmts.m, k)
		_ = st.Close()
	}
}
