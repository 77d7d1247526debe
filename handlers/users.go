package handlers

import (
	"errors"
	"strconv"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
)

// ErrUnusableUser is wrapped by the permanent error of a job whose user
// document has a field of a shape the handler cannot work with (another
// app wrote it): friends that is not an array of strings, a name that is
// not a string. The error names the user and the field.
var ErrUnusableUser = errors.New("user document unusable")

// usersCollection returns the users collection, read from the primary: the
// handlers read back what they have just written, and a readPreference in
// the connection string must not send those reads to a lagging secondary.
func usersCollection(db *mongo.Database) *mongo.Collection {
	return db.Collection(UsersCollection, options.Collection().SetReadPreference(readpref.Primary()))
}

// commentsCollection returns the comments collection, read from the
// primary (see usersCollection).
func commentsCollection(db *mongo.Database) *mongo.Collection {
	return db.Collection(CommentsCollection, options.Collection().SetReadPreference(readpref.Primary()))
}

// describeUserValue names v's BSON type and shows its value, for errors
// about documents written by other apps.
func describeUserValue(v bson.RawValue) string {
	switch v.Type {
	case bson.TypeNull:
		return "null"
	case bson.TypeDouble:
		return "a double (" + strconv.FormatFloat(v.Double(), 'g', -1, 64) + ")"
	case bson.TypeString:
		return "a string (" + strconv.Quote(v.StringValue()) + ")"
	}
	return "a " + v.Type.String() + " (" + v.String() + ")"
}
