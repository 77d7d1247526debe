// Copyright 2021 FerretDB Inc.
//
// Modified for docket's devdb: each update statement's query is closed when
// the statement is done, not when the command is, and the documents it
// modifies are written in one SQLite transaction, not one each
// (see updateDocument and batchedUpdates). The
// original is internal/handler/msg_update.go of FerretDB v1.24.0; devdb
// builds with this file in its place (_overlay/workspace.sh).
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

package handler

import (
	"context"
	"fmt"

	"github.com/FerretDB/wire"

	"github.com/FerretDB/FerretDB/internal/backends"
	"github.com/FerretDB/FerretDB/internal/handler/common"
	"github.com/FerretDB/FerretDB/internal/handler/handlererrors"
	"github.com/FerretDB/FerretDB/internal/types"
	"github.com/FerretDB/FerretDB/internal/util/iterator"
	"github.com/FerretDB/FerretDB/internal/util/lazyerrors"
	"github.com/FerretDB/FerretDB/internal/util/must"
)

// MsgUpdate implements `update` command.
//
// The passed context is canceled when the client connection is closed.
func (h *Handler) MsgUpdate(connCtx context.Context, msg *wire.OpMsg) (*wire.OpMsg, error) {
	document, err := opMsgDocument(msg)
	if err != nil {
		return nil, lazyerrors.Error(err)
	}

	params, err := common.GetUpdateParams(document, h.L)
	if err != nil {
		return nil, lazyerrors.Error(err)
	}

	// TODO https://github.com/FerretDB/FerretDB/issues/2612
	_ = params.Ordered

	matched, modified, upserted, err := h.updateDocument(connCtx, params)
	if err != nil {
		return nil, handleUpdateError(params.DB, params.Collection, "update", err)
	}

	res := must.NotFail(types.NewDocument(
		"n", matched,
	))

	if upserted.Len() != 0 {
		res.Set("upserted", upserted)
	}

	res.Set("nModified", modified)
	res.Set("ok", float64(1))

	return documentOpMsg(
		res,
	)
}

// updateDocument iterate through all documents in collection and update them.
func (h *Handler) updateDocument(ctx context.Context, params *common.UpdateParams) (int32, int32, *types.Array, error) {
	var matched, modified int32
	var upserted types.Array

	db, err := h.b.Database(params.DB)
	if err != nil {
		if backends.ErrorCodeIs(err, backends.ErrorCodeDatabaseNameIsInvalid) {
			msg := fmt.Sprintf("Invalid namespace specified '%s.%s'", params.DB, params.Collection)
			return 0, 0, nil, handlererrors.NewCommandErrorMsgWithArgument(handlererrors.ErrInvalidNamespace, msg, "update")
		}

		return 0, 0, nil, lazyerrors.Error(err)
	}

	err = db.CreateCollection(ctx, &backends.CreateCollectionParams{Name: params.Collection})

	switch {
	case err == nil:
		// nothing
	case backends.ErrorCodeIs(err, backends.ErrorCodeCollectionAlreadyExists):
		// nothing
	case backends.ErrorCodeIs(err, backends.ErrorCodeCollectionNameIsInvalid):
		msg := fmt.Sprintf("Invalid collection name: %s", params.Collection)
		return 0, 0, nil, handlererrors.NewCommandErrorMsgWithArgument(handlererrors.ErrInvalidNamespace, msg, "insert")
	default:
		return 0, 0, nil, lazyerrors.Error(err)
	}

	for _, u := range params.Updates {
		c, err := db.Collection(params.Collection)
		if err != nil {
			if backends.ErrorCodeIs(err, backends.ErrorCodeCollectionNameIsInvalid) {
				msg := fmt.Sprintf("Invalid collection name: %s", params.Collection)
				return 0, 0, nil, handlererrors.NewCommandErrorMsgWithArgument(handlererrors.ErrInvalidNamespace, msg, "insert")
			}

			return 0, 0, nil, lazyerrors.Error(err)
		}

		var qp backends.QueryParams
		if !h.DisablePushdown {
			qp.Filter = u.Filter
		}

		res, err := c.Query(ctx, &qp)
		if err != nil {
			return 0, 0, nil, lazyerrors.Error(err)
		}

		closer := iterator.NewMultiCloser()

		closer.Add(res.Iter)

		iter := common.FilterIterator(res.Iter, closer, u.Filter)

		if !u.Multi {
			iter = common.LimitIterator(iter, closer, 1)
		}

		batch := &batchedUpdates{Collection: c}
		result, err := common.UpdateDocument(ctx, batch, "update", iter, &u)
		// Closed now, not deferred to the end of the command: each open
		// query holds one of the pool's 100 connections, so an update
		// command of 100 statements (a bulkWrite) waited forever for one.
		closer.Close()
		// Written even after an error, as MongoDB keeps the documents a
		// multi-document update wrote before one failed.
		if ferr := batch.flush(ctx); err == nil {
			err = ferr
		}
		if err != nil {
			return 0, 0, nil, lazyerrors.Error(err)
		}

		matched += result.Matched.Count
		modified += result.Modified.Count

		if result.Upserted.Doc != nil {
			doc := result.Upserted.Doc
			upserted.Append(must.NotFail(types.NewDocument(
				"index", int32(upserted.Len()),
				"_id", must.NotFail(doc.Get("_id")),
			)))

			// in case of upsert, MongoDB sets the matched count to 1
			matched++
		}
	}

	return matched, modified, &upserted, nil
}

// batchedUpdates is a collection whose UpdateAll keeps the documents, so
// that a statement's modified documents are written together by flush, in
// one transaction of the backend, instead of one transaction per document
// (about 1 ms each, the most of a multi-document write's time). devdb's
// front runs one write command at a time, so no other command sees the
// statement half-applied either way; with --interleave the front sends a
// multi-document statement as single-document ones, which this leaves as
// they are. At most batchedUpdatesMax documents are held.
type batchedUpdates struct {
	backends.Collection
	docs []*types.Document
}

const batchedUpdatesMax = 1000

// UpdateAll holds params' documents, writing them when batchedUpdatesMax
// are held. It reports them all updated, as UpdateDocument expects.
func (b *batchedUpdates) UpdateAll(ctx context.Context, params *backends.UpdateAllParams) (*backends.UpdateAllResult, error) {
	b.docs = append(b.docs, params.Docs...)
	if len(b.docs) >= batchedUpdatesMax {
		if err := b.flush(ctx); err != nil {
			return nil, err
		}
	}

	return &backends.UpdateAllResult{Updated: int32(len(params.Docs))}, nil
}

// flush writes the documents held. When their transaction fails (a unique
// index's duplicate at one document), it wrote none of them, so they are
// written again one at a time up to the failing one: MongoDB keeps the
// documents a multi-document update wrote before one failed.
func (b *batchedUpdates) flush(ctx context.Context) error {
	docs := b.docs
	b.docs = nil
	if len(docs) == 0 {
		return nil
	}

	if _, err := b.Collection.UpdateAll(ctx, &backends.UpdateAllParams{Docs: docs}); err == nil || len(docs) == 1 {
		return err
	}
	for _, doc := range docs {
		if _, err := b.Collection.UpdateAll(ctx, &backends.UpdateAllParams{Docs: []*types.Document{doc}}); err != nil {
			return err
		}
	}

	return nil
}
