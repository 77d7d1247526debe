package workflowgraph_test

import (
	"encoding/xml"
	"fmt"
	"io"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/docketq/docket/cmd/internal/workflowgraph"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
)

type box struct{ x, y, w, h int }

// drawnBoxesAndPaths reads a drawing's boxes (the nested svg of each
// node) and its edges' paths.
func drawnBoxesAndPaths(t *testing.T, svg string) ([]box, []string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(svg))
	var boxes []box
	var paths []string
	depth := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return boxes, paths
		}
		require.NoError(t, err)
		switch tok := tok.(type) {
		case xml.StartElement:
			depth++
			attr := map[string]string{}
			for _, a := range tok.Attr {
				attr[a.Name.Local] = a.Value
			}
			n := func(k string) int { v, err := strconv.Atoi(attr[k]); require.NoError(t, err, k); return v }
			if tok.Name.Local == "svg" && depth > 1 {
				boxes = append(boxes, box{n("x"), n("y"), n("width"), n("height")})
			}
			if tok.Name.Local == "path" && strings.HasPrefix(attr["class"], "edge") {
				paths = append(paths, attr["d"])
			}
		case xml.EndElement:
			depth--
		}
	}
}

var pathPoint = regexp.MustCompile(`(-?\d+),(-?\d+)`)

// Random DAGs, wide and deep: every edge starts at the bottom middle of a
// box and ends at the top middle of another, and where it crosses a
// layer it runs upright through a gap, behind no box.
func TestSVGEdgesPassBetweenBoxes(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	long := 0
	for round := range 40 {
		tasks := randomDAG(r, 5+r.IntN(120))
		out := workflowgraph.SVG(workflowgraph.Layout(tasks), func(queue.JobID) string { return "/" })
		boxes, paths := drawnBoxesAndPaths(t, out)
		at := func(x, y int, top bool) bool {
			for _, b := range boxes {
				if x == b.x+b.w/2 && ((top && y == b.y) || (!top && y == b.y+b.h)) {
					return true
				}
			}
			return false
		}
		for _, p := range paths {
			pts := pathPoint.FindAllStringSubmatch(p, -1)
			xy := func(i int) (int, int) {
				x, _ := strconv.Atoi(pts[i][1])
				y, _ := strconv.Atoi(pts[i][2])
				return x, y
			}
			x0, y0 := xy(0)
			xn, yn := xy(len(pts) - 1)
			require.True(t, at(x0, y0, false), "round %d: %s starts at the bottom of a box", round, p)
			require.True(t, at(xn, yn, true), "round %d: %s ends at the top of a box", round, p)
			ls := regexp.MustCompile(`L(-?\d+),(-?\d+)`).FindAllStringSubmatch(p, -1)
			if yn > y0 {
				crossed := (yn-y0+boxes[0].h)/(boxes[0].h+46) - 1
				require.Len(t, ls, crossed, "round %d: %s passes once through each layer it crosses", round, p)
				long += crossed
			}
			for _, m := range ls {
				x, _ := strconv.Atoi(m[1])
				y, _ := strconv.Atoi(m[2])
				for _, b := range boxes {
					inRow := y > b.y && y-b.h <= b.y+b.h
					require.False(t, inRow && x >= b.x && x <= b.x+b.w, "round %d: %s runs behind the box at %+v", round, p, b)
				}
			}
		}
		require.NotEmpty(t, paths, fmt.Sprint(len(tasks)))
	}
	require.Greater(t, long, 100, "edges that cross layers were drawn")
}
