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

// stmtCacheSize bounds the statements one DB keeps prepared: past it, they
// are all closed and the cache begins again.
const stmtCacheSize = 256

// stmtCaches maps each DB that prepared a statement to its stmtCache.
var stmtCaches sync.Map

type stmtCache struct {
	mu    sync.Mutex
	stmts map[string]*sql.Stmt
}

// QueryPreparedContext is QueryContext with query prepared once and kept:
// for a query run often whose text is long. A statement that fails is
// prepared again at its next use (an index it names may have gone).
func (db *DB) QueryPreparedContext(ctx context.Context, query string, args ...any) (*Rows, error) {
	st, err := db.prepared(ctx, query)
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		db.forget(query, st)
		return nil, err
	}
	return wrapRows(rows), nil
}

func (db *DB) cache() *stmtCache {
	c, _ := stmtCaches.LoadOrStore(db, &stmtCache{stmts: map[string]*sql.Stmt{}})
	return c.(*stmtCache)
}

func (db *DB) prepared(ctx context.Context, query string) (*sql.Stmt, error) {
	c := db.cache()
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.stmts[query]; ok {
		return st, nil
	}
	st, err := db.sqlDB.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if len(c.stmts) >= stmtCacheSize {
		for q, old := range c.stmts {
			_ = old.Close()
			delete(c.stmts, q)
		}
	}
	c.stmts[query] = st
	return st, nil
}

// forget closes st and drops it, if it is still query's.
func (db *DB) forget(query string, st *sql.Stmt) {
	c := db.cache()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stmts[query] == st {
		delete(c.stmts, query)
		_ = st.Close()
	}
}
