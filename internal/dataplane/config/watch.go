package config

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/utils/clock"

	"github.com/sluice-dev/sluice/internal/dataplane/metrics"
	"github.com/sluice-dev/sluice/internal/policy"
)

// DefaultRecheck is Loader.Recheck when zero: the safety net behind file events.
const DefaultRecheck = 10 * time.Second

// Loader reads the configuration files, publishes compiled configurations and keeps them
// current. Create it with NewLoader; it is safe for concurrent use.
//
// A missing policies.json is a valid state, "no policies": traffic passes through, the log
// says so, and the loader counts as ready. A policies.json (or labels file) that cannot be
// read, parsed or validated is a failed load: it is logged and counted in
// sluice_config_reload_failures_total, and the configuration in use stays. Until a first load
// succeeds, Current returns an empty configuration (pass through) and Ready is false.
type Loader struct {
	// ConfigPath is policies.json.
	ConfigPath string
	// LabelsPath is the downward API labels file; empty for none.
	LabelsPath string
	// Labels are static labels (--pod-labels); they override the file's.
	Labels map[string]string
	// PodName is this pod's name (--pod-name), which ranks it among a policy's pods for its
	// local shares; empty when not known.
	PodName string
	// Domains makes the loader compile for the RLS server: every policy's descriptor rules by
	// domain (CompileDomains), for the replica PodName, instead of the policies Labels select.
	Domains bool
	// Recheck is the period of the re-read that backs up file events.
	Recheck time.Duration
	// Clock ticks the re-read; nil means the real clock.
	Clock   clock.WithTicker
	Metrics *metrics.Metrics
	Log     *slog.Logger
	// Verifiers keeps the policies' token verifiers across reloads; its Options are theirs.
	Verifiers Verifiers
	// Adaptives keeps the policies' adaptive limits across reloads.
	Adaptives Adaptives

	current atomic.Pointer[Config]
	ready   atomic.Bool
	mu      sync.Mutex // serialises loads
	gen     uint64
	failed  string // hash of the last input that failed to load
}

// NewLoader returns a Loader whose Current is an empty configuration until Load succeeds.
func NewLoader(configPath, labelsPath string, static map[string]string, m *metrics.Metrics, log *slog.Logger) *Loader {
	l := &Loader{ConfigPath: configPath, LabelsPath: labelsPath, Labels: static, Metrics: m, Log: log}
	l.current.Store(&Config{})
	return l
}

// Current returns the configuration in use; never nil.
func (l *Loader) Current() *Config { return l.current.Load() }

// Ready reports whether a load has succeeded (including "no policies.json").
func (l *Loader) Ready() bool { return l.ready.Load() }

// Load reads the files once and publishes the result if it differs from the configuration in
// use. It returns the error of a failed load, which has already been logged and counted.
func (l *Loader) Load() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.load()
	if err != nil {
		l.Metrics.ReloadFailures.Inc()
		l.Log.Error("Configuration not loaded; keeping the configuration in use",
			"config", l.ConfigPath, "labels", l.LabelsPath, "generation", l.current.Load().Generation, "error", err)
	}
	return err
}

func (l *Loader) load() error {
	var labelData []byte
	if l.LabelsPath != "" {
		b, err := os.ReadFile(l.LabelsPath)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// No downward API volume: only static labels.
		case err != nil:
			return fmt.Errorf("reading labels: %w", err)
		default:
			labelData = b
		}
	}
	data, err := os.ReadFile(l.ConfigPath)
	present := true
	if errors.Is(err, fs.ErrNotExist) {
		present, data = false, nil
	} else if err != nil {
		return fmt.Errorf("reading %s: %w", l.ConfigPath, err)
	}
	// A compressed document is an envelope naming the file beside it (kubelet projects every
	// key of the ConfigMap, binaryData included, into the same directory and swaps them together).
	var compressed []byte
	if _, ok := policy.CompressedFile(data); present && ok {
		// The one name an envelope may give (CompressedFile checks it), never a path from the file.
		if compressed, err = os.ReadFile(filepath.Join(filepath.Dir(l.ConfigPath), policy.CompressedKey)); err != nil {
			return fmt.Errorf("reading the compressed policies %s: %w", policy.CompressedKey, err)
		}
	}
	hash := inputHash(present, data, compressed, labelData, l.Labels, l.PodName)
	if l.ready.Load() && l.current.Load().hash == hash {
		return nil // unchanged
	}
	if hash == l.failed {
		return nil // the same bad input as before: logged and counted once
	}
	next, err := l.compile(present, data, compressed, labelData)
	if err != nil {
		l.failed = hash
		return err
	}
	l.failed = ""
	l.Verifiers.retain(next)
	l.Adaptives.retain(next)
	l.gen++
	next.Generation, next.hash = l.gen, hash
	l.current.Store(next)
	l.ready.Store(true)
	l.Metrics.ConfigGeneration.Set(float64(next.Generation))
	l.Metrics.ConfigPolicies.Set(float64(len(next.Policies)))
	l.Metrics.ConfigReloads.Inc()
	if !present {
		l.Log.Warn("No policies file; passing all traffic through unlimited",
			"config", l.ConfigPath, "generation", next.Generation)
		return nil
	}
	names := make([]string, 0, len(next.Policies))
	rules := 0
	for _, p := range next.Policies {
		names = append(names, p.Name)
		rules += len(p.Rules)
	}
	for d, rs := range next.Domains {
		names = append(names, "domain "+d)
		rules += len(rs)
	}
	l.Log.Info("Loaded policies", "config", l.ConfigPath, "generation", next.Generation,
		"namespace", next.Namespace, "policies", names, "rules", rules, "labels", next.Labels, "sha256", hash[:16])
	return nil
}

func (l *Loader) compile(present bool, data, compressed, labelData []byte) (*Config, error) {
	labels := map[string]string{}
	if labelData != nil {
		var err error
		if labels, err = ParseLabels(labelData); err != nil {
			return nil, err
		}
	}
	maps.Copy(labels, l.Labels)
	if !present {
		return &Config{Labels: labels}, nil
	}
	doc, err := policy.Decode(data, compressed)
	if err != nil {
		return nil, err
	}
	if l.Domains {
		return CompileDomains(doc, l.PodName, l.Metrics)
	}
	if l.Verifiers.Options.Log == nil {
		l.Verifiers.Options.Log = l.Log
	}
	return compileFor(doc, labels, l.PodName, l.Metrics, &l.Verifiers, &l.Adaptives)
}

func inputHash(present bool, data, compressed, labelData []byte, labels map[string]string, podName string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%d:%s", len(podName), podName)
	if present {
		fmt.Fprintf(h, "%d:", len(data))
		h.Write(data)
		fmt.Fprintf(h, "\x00%d:", len(compressed))
		h.Write(compressed)
	}
	fmt.Fprintf(h, "\x00%d:", len(labelData))
	h.Write(labelData)
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		fmt.Fprintf(h, "\x00%d:%s%d:%s", len(k), k, len(labels[k]), labels[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Run watches the directories holding the files and reloads on every change there, and every
// Recheck, until ctx is done. Watching the directories rather than the files is what sees a
// kubelet update: kubelet writes a new timestamped directory and renames a ..data symlink over
// the old one, so the file's path never gets a write event of its own. Run calls Load first.
func (l *Loader) Run(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching configuration: %w", err)
	}
	defer func() { _ = w.Close() }()
	dirs := []string{filepath.Dir(l.ConfigPath)}
	if l.LabelsPath != "" && filepath.Dir(l.LabelsPath) != dirs[0] {
		dirs = append(dirs, filepath.Dir(l.LabelsPath))
	}
	for _, d := range dirs {
		if err := w.Add(d); err != nil {
			// The directory may appear later (an optional volume); the recheck covers it.
			l.Log.Warn("Not watching a configuration directory; relying on periodic re-reads",
				"dir", d, "every", l.recheck(), "error", err)
		}
	}
	_ = l.Load()
	clk := l.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	tick := clk.NewTicker(l.recheck())
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-w.Events:
			if !ok {
				return nil
			}
			// Drain what is already queued: one kubelet update is several events.
			for drained := false; !drained; {
				select {
				case <-w.Events:
				default:
					drained = true
				}
			}
			_ = l.Load()
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			l.Log.Warn("Configuration watch error; relying on periodic re-reads", "error", err)
		case <-tick.C():
			for _, d := range dirs {
				_ = w.Add(d) // re-adding a watched directory is a no-op; this picks up late ones
			}
			_ = l.Load()
		}
	}
}

func (l *Loader) recheck() time.Duration {
	if l.Recheck > 0 {
		return l.Recheck
	}
	return DefaultRecheck
}
