package testdb

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockBuilds takes a lock shared by all test binaries of this user on this
// machine and returns the function that releases it.
func lockBuilds() (func(), error) {
	name := filepath.Join(os.TempDir(), fmt.Sprintf("docket-testdb-build-%d.lock", os.Getuid()))

	f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("testdb: build lock: %w", err)
	}

	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("testdb: build lock: %w", err)
	}

	// Closing the file releases the lock.
	return func() { _ = f.Close() }, nil
}
