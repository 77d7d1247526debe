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

// stmts holds the prepared statements, by DB and query, and the queries
// being prepared in the background (PreparedIn).
var stmts = struct {
	sync.Mutex
	m         map[stmtKey]*sql.Stmt
	preparing map[stmtKey]bool
}{m: map[stmtKey]*sql.Stmt{}, preparing: map[stmtKey]bool{}}

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

// prepared returns the statement of query kept, preparing it first when
// there is none. The prepare takes a connection of the pool, so it runs
// without the cache's lock: a caller holding the lock while it waits for
// a connection would stop every other, those that hold connections too.
func (db *DB) prepared(ctx context.Context, query string) (*sql.Stmt, error) {
	if st := db.kept(query); st != nil {
		return st, nil
	}
	st, err := db.sqlDB.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	stmts.Lock()
	defer stmts.Unlock()
	k := stmtKey{db, query}
	if had, ok := stmts.m[k]; ok { // prepared meanwhile by another
		_ = st.Close()
		return had, nil
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

// kept returns the statement of query kept, or nil.
func (db *DB) kept(query string) *sql.Stmt {
	stmts.Lock()
	defer stmts.Unlock()
	return stmts.m[stmtKey{db, query}]
}

// PreparedIn returns the statement of query for use in tx, kept prepared
// over transactions as QueryPreparedContext's are: a write that SQLite
// would parse at each command (an update's statement names the table's
// indexes, whose expressions make its parse cost more than the write of a
// document). When none is kept yet, the statement is prepared in tx
// alone, and kept for the next by a prepare of its own in the background:
// tx holds a connection of the pool, and waiting for another would wait
// on every transaction that does the same. The caller closes it.
func (db *DB) PreparedIn(ctx context.Context, tx *Tx, query string) (*sql.Stmt, error) {
	if st := db.kept(query); st != nil {
		return tx.sqlTx.StmtContext(ctx, st), nil
	}
	k := stmtKey{db, query}
	stmts.Lock()
	start := !stmts.preparing[k]
	stmts.preparing[k] = true
	stmts.Unlock()
	if start { // one background prepare per query at a time
		go func() {
			_, _ = db.prepared(context.Background(), query)
			stmts.Lock()
			delete(stmts.preparing, k)
			stmts.Unlock()
		}()
	}
	return tx.sqlTx.PrepareContext(ctx, query)
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
