package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/docketq/docket/internal/testdb"
	"github.com/stretchr/testify/require"
)

// openPTY returns the two ends of a new pseudo-terminal.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	unlock := int32(0)
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		_ = m.Close()
		t.Skipf("unlock the pseudo-terminal: %v", e)
	}
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		_ = m.Close()
		t.Skipf("the pseudo-terminal's number: %v", e)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		_ = m.Close()
		t.Skipf("open the pseudo-terminal: %v", err)
	}
	return m, s
}

// TestBatchDrawsProgressOnATerminal: with stderr a terminal, a batch draws
// its progress line (count, rate, time left) and erases it before the
// report. Not parallel: it shortens showAfter for the package.
func TestBatchDrawsProgressOnATerminal(t *testing.T) {
	master, tty := openPTY(t)
	defer master.Close()
	require.True(t, isTerminal(tty))

	saved := showAfter
	showAfter = 0
	defer func() { showAfter = saved }()

	var screen bytes.Buffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		_, _ = io.Copy(&screen, master) // ends when the terminal closes
	}()
	db := testdb.NewDB(t)
	var out bytes.Buffer
	code := Enqueue([]string{"batch", "--mongo-uri", testdb.URI(), "--db", db.Name()}, strings.NewReader(batchLines(2500)), &out, tty)
	require.NoError(t, tty.Close())
	<-read
	require.Equal(t, 0, code, screen.String())
	require.Contains(t, screen.String(), "\renqueue batch: 1000/2500 jobs (40%), ")
	require.Contains(t, screen.String(), "jobs/s, ETA ")
	require.Contains(t, screen.String(), "\r\x1b[Kenqueue batch: 2500 inserted, 0 already there, 0 not inserted")
	require.Len(t, strings.Fields(out.String()), 2500)
}
