package store

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// Slots: a bounded queue's admitted jobs each hold a slot of its capacity
// (package queue admits them), a limited kind's or queue's running jobs a
// run slot of its limit (limit.go). The writes that end or give back an
// attempt free them (Finish and requeue, lease.go).

// CapacitySlotField is the job field holding its slot of the queue's
// capacity; only admitted, unfinished jobs of a bounded queue have it.
const CapacitySlotField = "capacitySlot"

// SlotKey is the value of capacitySlot for slot k of queue q. Queue names
// may hold '/': the slot number is after the last one, and has none.
func SlotKey(q string, k int) string { return q + "/" + strconv.Itoa(k) }

// QueueLoad is what an admission reads of a queue (package queue), and a
// claim of a limit's run slots (limit.go): the slots held, and how many
// unfinished jobs hold none.
type QueueLoad struct {
	// Slots are the slot numbers held.
	Slots map[int]bool
	// Unslotted counts the unfinished jobs that hold no slot.
	Unslotted int
}

// Count is how many jobs of the queue are unfinished (a finished job whose
// slot another app left set counts until the reaper frees it).
func (l QueueLoad) Count() int { return len(l.Slots) + l.Unslotted }

// hold counts a running job that holds slot, "<target>/<k>", or none.
func (l *QueueLoad) hold(target string, slot bson.RawValue) {
	if k, ok := slotNumber(target, slot); ok {
		l.Slots[k] = true
	} else {
		l.Unslotted++
	}
}

// FreeSlots returns the slots an admission to a queue of capacity may
// take, none when it is full: those not held below capacity minus the
// overflow, the unfinished jobs holding no slot below capacity (see the
// comment at the top of package queue's capacity.go).
func (l QueueLoad) FreeSlots(capacity int) []int {
	if l.Count() >= capacity {
		return nil
	}
	overflow := l.Unslotted
	for k := range l.Slots {
		if k >= capacity {
			overflow++
		}
	}
	free := make([]int, 0, capacity-l.Count())
	for k := range capacity - overflow {
		if !l.Slots[k] {
			free = append(free, k)
		}
	}
	rand.Shuffle(len(free), func(a, b int) { free[a], free[b] = free[b], free[a] })
	return free
}

// StoredCount reads the whole number in field of a settings document that
// an operator or another application may have written by hand: an int, or
// a double that is one, from 0 to max. malformed says what is wrong
// otherwise.
func StoredCount(d bson.Raw, field string, max int) (n int, malformed string) {
	v := d.Lookup(field)
	var i int64
	switch v.Type {
	case bson.TypeInt32, bson.TypeInt64:
		i, _ = v.AsInt64OK()
	case bson.TypeDouble:
		f := v.Double()
		if f != math.Trunc(f) || math.IsInf(f, 0) {
			return 0, fmt.Sprintf("%s is %v, not an integer", field, f)
		}
		if f < 0 || f > float64(max) { // before the conversion, which a huge f overflows
			return 0, fmt.Sprintf("%s %v is not between 0 and %d", field, f, max)
		}
		i = int64(f)
	default:
		return 0, fmt.Sprintf("%s is %s %s, not an integer", field, v.Type, v)
	}
	if i < 0 || i > int64(max) {
		return 0, fmt.Sprintf("%s %d is not between 0 and %d", field, i, max)
	}
	return int(i), ""
}

// StoredName reads the _id of the document d, another application's
// perhaps, as the name of a queue or a limit (what): malformed says so
// when it is not a string, and name is then the id as extended JSON.
func StoredName(d bson.Raw, what string) (name, malformed string) {
	id := d.Lookup("_id")
	if name, ok := id.StringValueOK(); ok {
		return name, ""
	}
	return id.String(), fmt.Sprintf("_id is a %s, not a %s name", id.Type, what)
}

// StoredStamp reads when, and by whom, a setting of the document d was
// written: its fields prefix+"At" and prefix+"By", each zero when it is
// missing or of another type.
func StoredStamp(d bson.Raw, prefix string) (at time.Time, by string) {
	if t, ok := d.Lookup(prefix + "At").TimeOK(); ok {
		at = t.UTC()
	}
	by, _ = d.Lookup(prefix + "By").StringValueOK()
	return at, by
}

// Stamp appends to set what StoredStamp reads back: PREFIXAt at and, when
// by is set, PREFIXBy by.
func Stamp(set bson.D, prefix string, at time.Time, by string) bson.D {
	set = append(set, bson.E{Key: prefix + "At", Value: at})
	if by != "" {
		set = append(set, bson.E{Key: prefix + "By", Value: by})
	}
	return set
}

// NameProblem says what is wrong with a kind or queue name, or returns ""
// when nothing is: what jobs.NameProblem refuses, and control characters
// (C0, DEL, C1: a newline, an escape sequence), which have no place in a
// name that tables, logs and metric labels show.
func NameProblem(s string) string {
	if p := jobs.NameProblem(s, jobs.MaxNameBytes); p != "" {
		return p
	}
	if i := strings.IndexFunc(s, unicode.IsControl); i >= 0 {
		r := []rune(s[i:])[0]
		return fmt.Sprintf("%q holds the control character %U at byte %d; names may not hold control characters", s, r, i)
	}
	return ""
}
