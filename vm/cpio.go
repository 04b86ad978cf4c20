package vm

import (
	"fmt"
	"io"
	"strings"
)

// A minimal writer of the "newc" cpio format, the one the kernel unpacks as
// an initramfs (Documentation/driver-api/early-userspace/buffer-format.rst):
// a 110-byte ASCII header of "070701" and 13 eight-digit hex fields, the
// NUL-terminated name, padding to 4 bytes, the data, padding to 4 bytes;
// the archive ends with an entry named "TRAILER!!!".

// File types in cpioEntry.mode (the st_mode bits).
const (
	cpioDir     = 0o040000
	cpioRegular = 0o100000
	cpioSymlink = 0o120000
	cpioCharDev = 0o020000
)

type cpioEntry struct {
	name                 string // absolute or relative; stored without the leading "/"
	mode                 uint32
	size                 int64
	rdevMajor, rdevMinor uint32
}

type cpioWriter struct {
	w     io.Writer
	off   int64
	ino   uint32
	files int
}

func newCPIOWriter(w io.Writer) *cpioWriter { return &cpioWriter{w: w, ino: 1} }

func (c *cpioWriter) write(p []byte) error {
	n, err := c.w.Write(p)
	c.off += int64(n)
	return err
}

func (c *cpioWriter) pad() error {
	if r := c.off % 4; r != 0 {
		return c.write(make([]byte, 4-r))
	}
	return nil
}

// add writes one entry; data supplies exactly e.size bytes.
func (c *cpioWriter) add(e cpioEntry, data io.Reader) error {
	name := strings.TrimPrefix(e.name, "/")
	if name == "" {
		name = "."
	}
	if e.size > 0xffffffff {
		return fmt.Errorf("cpio: %s: %d bytes is too large for newc", e.name, e.size)
	}
	nlink := 1
	if e.mode&0o170000 == cpioDir {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		c.ino, e.mode, 0, 0, nlink, 0, e.size, 0, 0, e.rdevMajor, e.rdevMinor, len(name)+1, 0)
	c.ino++
	if err := c.write([]byte(hdr)); err != nil {
		return err
	}
	if err := c.write(append([]byte(name), 0)); err != nil {
		return err
	}
	if err := c.pad(); err != nil {
		return err
	}
	if e.size > 0 {
		n, err := io.Copy(writerFunc(c.write), io.LimitReader(data, e.size))
		if err != nil {
			return fmt.Errorf("cpio: %s: %w", e.name, err)
		}
		if n != e.size {
			return fmt.Errorf("cpio: %s: got %d of %d bytes (file changed?)", e.name, n, e.size)
		}
	}
	c.files++
	return c.pad()
}

// close writes the trailer. The underlying writer is not closed.
func (c *cpioWriter) close() error {
	return c.add(cpioEntry{name: "TRAILER!!!"}, nil)
}

type writerFunc func([]byte) error

func (f writerFunc) Write(p []byte) (int, error) {
	if err := f(p); err != nil {
		return 0, err
	}
	return len(p), nil
}
