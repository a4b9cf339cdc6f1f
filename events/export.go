package events

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults and bounds of the export file (export.max-bytes,
// export.max-files).
const (
	DefaultExportMaxBytes = 64 << 20
	MinExportMaxBytes     = 64 << 10
	MaxExportMaxBytes     = 1 << 40
	DefaultExportMaxFiles = 4
	MaxExportMaxFiles     = 1000
	// ExportQueueSize is how many events the export's queue holds while
	// the writer is behind; past it, events are dropped (counted, and a
	// "dropped" line says how many where they are missing).
	ExportQueueSize = 8192
)

// ExportOptions say where and how big the export file is.
type ExportOptions struct {
	// Path is the file. Its directory is created when missing (mode
	// 0700) and must belong to the agent's user and be writable by
	// nobody else (the file holds every user's events).
	Path string
	// MaxBytes is the size at which the file is rotated: a line that
	// would take it past MaxBytes goes to a new file, Path.1 holds the
	// previous one, Path.2 the one before... (DefaultExportMaxBytes).
	MaxBytes int64
	// MaxFiles is how many rotated files are kept beside Path
	// (DefaultExportMaxFiles); the oldest goes.
	MaxFiles int
	Logger   *slog.Logger
}

// ExportStats counts what the export wrote and lost.
type ExportStats struct {
	File      string `json:"file"`
	Written   uint64 `json:"written_total"`
	Bytes     int64  `json:"bytes"` // in the current file
	Rotations uint64 `json:"rotations_total"`
	// Dropped counts events the writer was too far behind to take;
	// Failed, events a write error lost.
	Dropped uint64 `json:"dropped_total"`
	Failed  uint64 `json:"failed_total"`
}

// Export writes every event of a hub to a file, one JSON object a line,
// rotating the file at a size bound. It writes whole lines only: a
// rotation never splits one, so a reader that follows the file by name
// and by inode (Fluent Bit's tail, Vector's file source) reads every
// event once across rotations.
type Export struct {
	opts ExportOptions
	f    *Follower
	dir  exportDir
	log  *slog.Logger

	file     *os.File
	w        *bufio.Writer
	size     int64
	buffered uint64 // lines in w not flushed yet

	written, rotations, failed, dropped atomic.Uint64
	bytes                               atomic.Int64

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// OpenExport opens (appending to) or creates the export file and starts
// writing h's events to it, until Close.
func OpenExport(h *Hub, opts ExportOptions) (*Export, error) {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultExportMaxBytes
	}
	if opts.MaxFiles <= 0 {
		opts.MaxFiles = DefaultExportMaxFiles
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	dir, err := openExportDir(filepath.Dir(opts.Path))
	if err != nil {
		return nil, fmt.Errorf("export file %s: %w", opts.Path, err)
	}
	x := &Export{opts: opts, dir: dir, log: opts.Logger, stop: make(chan struct{}), done: make(chan struct{})}
	if err := x.open(); err != nil {
		dir.close()
		return nil, fmt.Errorf("export file %s: %w", opts.Path, err)
	}
	h.mu.Lock()
	x.f = h.follow(0, nil, ExportQueueSize, false)
	h.mu.Unlock()
	go x.run()
	return x, nil
}

func (x *Export) name() string { return filepath.Base(x.opts.Path) }

// open opens the current file for appending.
func (x *Export) open() error {
	f, err := x.dir.create(x.name())
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	x.file, x.size = f, st.Size()
	x.bytes.Store(x.size)
	if x.w == nil {
		x.w = bufio.NewWriterSize(f, 64<<10)
	} else {
		x.w.Reset(f)
	}
	return nil
}

// run writes events as they come, flushing whenever the queue is empty,
// so a reader of the file is at most one queue's drain behind.
func (x *Export) run() {
	defer close(x.done)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-x.stop
		cancel()
	}()
	// drain writes what is queued without waiting, then flushes.
	drain := func() {
		for {
			e, ok := x.f.Pending()
			if !ok {
				break
			}
			x.write(e)
		}
		x.flush()
	}
	for {
		e, ok := x.f.Next(ctx)
		if !ok {
			break
		}
		x.write(e)
		drain()
	}
	drain() // closing: what is queued still goes to the file
}

// write appends e's line, rotating first when the line would take the
// file past its bound.
func (x *Export) write(e Event) {
	if e.Kind == Dropped {
		x.dropped.Add(e.Count)
	}
	line, err := json.Marshal(e)
	if err != nil {
		x.failed.Add(1)
		return
	}
	line = append(line, '\n')
	if x.size > 0 && x.size+int64(len(line)) > x.opts.MaxBytes {
		if err := x.rotate(); err != nil {
			x.log.Error("export file: rotating failed; writing on to the same file", "file", x.opts.Path, "err", err)
		}
	}
	if x.file == nil {
		if err := x.open(); err != nil {
			x.failed.Add(1)
			return
		}
	}
	if _, err := x.w.Write(line); err != nil {
		x.failed.Add(1)
		return
	}
	x.size += int64(len(line))
	x.bytes.Store(x.size)
	x.buffered++
}

func (x *Export) flush() {
	if x.w == nil || x.w.Buffered() == 0 {
		return
	}
	n := x.buffered
	x.buffered = 0
	if err := x.w.Flush(); err != nil {
		x.log.Error("export file: write failed", "file", x.opts.Path, "lines", n, "err", err)
		x.w.Reset(x.file) // what was buffered is lost: counted
		x.failed.Add(n)
		return
	}
	x.written.Add(n)
}

// rotate closes the current file, shifts Path.N to Path.N+1 (dropping
// the oldest past MaxFiles), renames the file Path.1 and starts a new
// one.
func (x *Export) rotate() error {
	x.flush()
	if err := x.file.Close(); err != nil {
		x.log.Warn("export file: closing before rotation", "file", x.opts.Path, "err", err)
	}
	x.file = nil
	base := x.name()
	rotated := func(i int) string { return base + "." + strconv.Itoa(i) }
	if err := x.dir.remove(rotated(x.opts.MaxFiles)); err != nil && !os.IsNotExist(err) {
		return err
	}
	for i := x.opts.MaxFiles - 1; i >= 1; i-- {
		if err := x.dir.rename(rotated(i), rotated(i+1)); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	if err := x.dir.rename(base, rotated(1)); err != nil {
		return err
	}
	x.rotations.Add(1)
	return x.open()
}

// Stats returns the export's counters.
func (x *Export) Stats() ExportStats {
	if x == nil {
		return ExportStats{}
	}
	return ExportStats{File: x.opts.Path, Written: x.written.Load(), Bytes: x.bytes.Load(), Rotations: x.rotations.Load(),
		Dropped: x.dropped.Load(), Failed: x.failed.Load()}
}

// Close stops following, writes what is queued and closes the file.
func (x *Export) Close() error {
	var err error
	x.once.Do(func() {
		x.f.Close() // nothing more comes; what is queued is written
		close(x.stop)
		select {
		case <-x.done:
		case <-time.After(10 * time.Second):
			err = fmt.Errorf("export file %s: the writer did not finish within 10s", x.opts.Path)
		}
		if x.file != nil && err == nil {
			err = x.file.Close()
		}
		x.dir.close()
	})
	return err
}
