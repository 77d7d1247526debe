package docket_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/docketq/docket/internal/testdb"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

func TestMain(m *testing.M) { testdb.Main(m) }

var (
	exampleOnce   sync.Once
	exampleClient *mongo.Client
)

// exampleDB returns an empty database on the test server for an example. A
// program would use mongo.Connect(options.Client().ApplyURI(uri)) and
// client.Database("app").
func exampleDB(name string) *mongo.Database {
	exampleOnce.Do(func() {
		c, err := mongo.Connect(options.Client().ApplyURI(testdb.URI()))
		if err != nil {
			panic(fmt.Sprintf("connect to the test server: %v", err))
		}
		exampleClient = c
	})
	db := exampleClient.Database("example_" + name)
	if err := db.Drop(context.Background()); err != nil {
		panic(err)
	}
	return db
}
