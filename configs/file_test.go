package configs

import "testing"

// FuzzDecodeFile: whatever bytes a configuration file holds, decoding it
// returns an error or a configuration, and never panics.
func FuzzDecodeFile(f *testing.F) {
	for _, seed := range []string{
		"", "---", "[]", "a", "mongo: [1]", "mongo:\n  uri: {a: 1}\n", "periodicJobs: {a: 1}",
		"periodicJobs: [1, [2], {name: a, args: 5, nope: 1}]", "capacities: 5", "x: &a {b: *a}",
		"worker: &w {lease: 1s}\nreaper: *w\n", "? [a]\n: 1\n", "worker:\n  queues: a\n  queues: b\n",
		"dashboard: {hosts: [a, {b: c}]}", "renameSweeper: {batch: x}", "<<: {mongo: {db: d}}",
		"worker: &w {<<: *w}", "a: &a [*a, {<<: *a}]", "app: {tree: &t {next: *t, <<: *t}}", "<<: [{mongo: {db: d}}, 5]",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var c Config
		var schedule string
		type tree struct {
			Next *tree
			Tags map[string][]int
		}
		var tr tree
		ss := append(fileSettings(&c), StringSetting("renameSweeper.schedule", "", "", "", &schedule), FileSetting("app.tree", "", &tr))
		_ = decodeFile(b, ss)
	})
}
