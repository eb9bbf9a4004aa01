package config

import (
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Watcher keeps the operator YAML loaded and reloads it when the file changes,
// without a restart (README.md#configuration). Readers call Current for the
// config in force or Subscribe to hear of a new one; either way they see a
// whole config, old or new, never a mix. A broken edit never replaces a good
// config: the last good one stays in force and Err says why the edit was
// refused.
//
// Changes are noticed through fsnotify on the file's directory — watching the
// directory, not the file, survives editors and `kubectl` that replace the
// file by rename or swap a symlink — plus a slow poll for file systems that
// send no events (NFS, some container mounts). Both only trigger a re-read;
// the content hash decides whether anything changed. The graph files the
// config names (graphs.files) are part of that hash: editing one reloads the
// config as editing the config itself does, noticed by the poll when the
// file lives outside the config's directory.
type Watcher struct {
	path     string
	log      *slog.Logger
	poll     time.Duration
	debounce time.Duration

	cur atomic.Pointer[Config]

	mu       sync.Mutex // guards the fields below and serialises reloads
	lastSum  [sha256.Size]byte
	files    []graphFile // the graph files of the last parse, as it read them
	err      error
	warnings []Warning
	subs     map[chan *Config]struct{}
	checks   []Check
	reports  []func(error)
}

// WatcherOption configures a Watcher.
type WatcherOption func(*Watcher)

// WithPollInterval sets how often the file is re-read when no file-system
// event arrives (default 5 s). Zero or less turns the poll off.
func WithPollInterval(d time.Duration) WatcherOption { return func(w *Watcher) { w.poll = d } }

// WithDebounce sets how long the watcher waits for a burst of file-system
// events to settle before it reads the file (default 100 ms): an editor's save
// is often several events, and the first may see a half-written file.
func WithDebounce(d time.Duration) WatcherOption { return func(w *Watcher) { w.debounce = d } }

// NewWatcher loads the file at path. It fails when that first load fails: a
// service must not start without a config it can read. Warnings are logged.
func NewWatcher(path string, log *slog.Logger, opts ...WatcherOption) (*Watcher, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Watcher{path: path, log: log, poll: 5 * time.Second, debounce: 100 * time.Millisecond, subs: map[chan *Config]struct{}{}}
	for _, o := range opts {
		o(w)
	}
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cfg, ws, files, err := parseIn(src, filepath.Dir(path))
	if err != nil {
		return nil, errors.Join(errors.New("config "+path), err)
	}
	LogWarnings(log, path, ws)
	w.files = files
	w.lastSum = configSum(src, nil, files)
	w.warnings = ws
	w.cur.Store(cfg)
	return w, nil
}

// Path is the file being watched.
func (w *Watcher) Path() string { return w.path }

// Current returns the config in force. It never returns nil.
func (w *Watcher) Current() *Config { return w.cur.Load() }

// Err returns why the latest change to the file was refused, or nil when the
// config in force is the file's current content.
func (w *Watcher) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Warnings returns the warnings of the config in force.
func (w *Watcher) Warnings() []Warning {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Warning(nil), w.warnings...)
}

// Subscribe returns a channel that receives each new config after a reload.
// It holds at most one: a slow reader skips to the newest config instead of
// holding the watcher up. Call cancel to stop; it closes the channel.
func (w *Watcher) Subscribe() (updates <-chan *Config, cancel func()) {
	ch := make(chan *Config, 1)
	w.mu.Lock()
	w.subs[ch] = struct{}{}
	w.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			w.mu.Lock()
			delete(w.subs, ch)
			w.mu.Unlock()
			close(ch)
		})
	}
}

// AddCheck makes check a rule of every config in force from now on: the
// config in force now — its error is returned, and a service refuses to start
// on it — and every reload, which is refused when check fails (the previous
// config stays, Err says why, and the refusal is logged). It is for rules only
// a service knows, such as the ledger's own login (RefuseLedgerLogin).
func (w *Watcher) AddCheck(check Check) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.checks = append(w.checks, check)
	return check(w.cur.Load())
}

// OnReload registers report to hear of every reload of a changed file: nil
// once the new config is in force, or the error that kept the previous one
// (a broken edit, a Check it failed). A host turns these into its event-log
// records (config.reloaded, config.reload_failed), so an operator sees a
// refused edit where the rest of the loop's refusals are, not only in one
// process's log. report runs with the watcher's lock held: it must not call
// the watcher.
func (w *Watcher) OnReload(report func(err error)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reports = append(w.reports, report)
}

// Reload re-reads the file now (for SIGHUP, or a test). It returns the error
// that kept the last good config in force, if any.
func (w *Watcher) Reload() error { return w.reload(true) }

// reload reads the file and, if its content changed (or force), parses it and
// swaps it in when it is good.
func (w *Watcher) reload(force bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	src, err := os.ReadFile(w.path)
	sum := configSum(src, err, rereadGraphFiles(w.files))
	if sum == w.lastSum && !force {
		return w.err
	}
	w.lastSum = sum
	if err != nil {
		w.refused(err)
		return err
	}
	cfg, ws, files, err := parseIn(src, filepath.Dir(w.path))
	// The sum of what this parse read, so that a graph file changed while
	// it ran is noticed by the next look.
	w.files = files
	w.lastSum = configSum(src, nil, files)
	if err == nil {
		err = runChecks(w.checks, cfg)
	}
	if err != nil {
		w.refused(err)
		return err
	}
	if changed := changedSettings(w.cur.Load().Settings, cfg.Settings); len(changed) > 0 {
		// Process settings are read once, at start (EnvWithConfig).
		ws = append(ws, Warning{Path: strings.Join(changed, ", "),
			Message: "sets process settings (LOOP_*), which are read at start: this change takes effect when the services restart"})
	}
	w.err = nil
	w.warnings = ws
	w.cur.Store(cfg)
	w.log.Info("config reloaded", slog.String("file", w.path), slog.String("version", cfg.Version))
	LogWarnings(w.log, w.path, ws)
	for _, report := range w.reports {
		report(nil)
	}
	for ch := range w.subs {
		select { // drop a stale config nobody read yet, then send the new one
		case <-ch:
		default:
		}
		ch <- cfg
	}
	return nil
}

// changedSettings lists the keys whose process setting differs between two
// configs, in file order.
func changedSettings(old, cur []FileSetting) []string {
	key := func(s FileSetting) string { return s.Name + "\x00" + s.Value + "\x00" + strings.Join(s.FromEnv, ",") }
	was := map[string]string{}
	for _, s := range old {
		was[s.Path] = key(s)
	}
	var out []string
	for _, s := range cur {
		if was[s.Path] != key(s) && !slices.Contains(out, s.Path) {
			out = append(out, s.Path)
		}
		delete(was, s.Path)
	}
	for _, s := range old {
		if _, gone := was[s.Path]; gone && !slices.Contains(out, s.Path) {
			out = append(out, s.Path)
		}
	}
	return out
}

// configSum digests the config's bytes (or the error reading them, so a
// file that stays missing is reported once) and its graph files.
func configSum(src []byte, readErr error, files []graphFile) [sha256.Size]byte {
	h := sha256.New()
	if readErr != nil {
		h.Write([]byte("\x00read error\x00" + readErr.Error()))
	} else {
		h.Write(src)
	}
	for _, f := range files {
		h.Write([]byte("\x00" + f.path + "\x00"))
		h.Write(f.sum[:])
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// rereadGraphFiles digests files' content as it is now.
func rereadGraphFiles(files []graphFile) []graphFile {
	out := make([]graphFile, len(files))
	for i, f := range files {
		data, err := readGraphFile(f.path)
		out[i] = graphFile{path: f.path, sum: sumGraphFile(data, err)}
	}
	return out
}

func (w *Watcher) refused(err error) {
	w.err = err
	w.log.Error("config change refused; keeping the last good config", slog.String("file", w.path), slog.Any("error", err))
	for _, report := range w.reports {
		report(err)
	}
}

// Run watches the file until ctx ends, then returns nil. If file-system
// events cannot be had, it logs why and relies on the poll.
func (w *Watcher) Run(ctx context.Context) error {
	var events <-chan fsnotify.Event
	var fsErrs <-chan error
	if fw, err := fsnotify.NewWatcher(); err != nil {
		w.log.Warn("config: no file-system events; polling only", slog.Any("error", err))
	} else {
		defer fw.Close()
		if err := fw.Add(filepath.Dir(w.path)); err != nil {
			w.log.Warn("config: cannot watch the config directory; polling only", slog.String("dir", filepath.Dir(w.path)), slog.Any("error", err))
		} else {
			events, fsErrs = fw.Events, fw.Errors
		}
	}
	var tick <-chan time.Time
	if w.poll > 0 {
		t := time.NewTicker(w.poll)
		defer t.Stop()
		tick = t.C
	}
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	defer settle.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			// Any event in the directory may be ours (a rename onto the file,
			// a ConfigMap's ..data swap); the hash sorts out the rest.
			settle.Reset(w.debounce)
		case err, ok := <-fsErrs:
			if !ok {
				fsErrs = nil
				continue
			}
			w.log.Warn("config: file-system watch error", slog.Any("error", err))
		case <-settle.C:
			_ = w.reload(false)
		case <-tick:
			_ = w.reload(false)
		}
	}
}
