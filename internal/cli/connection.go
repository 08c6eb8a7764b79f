package cli

import (
	"context"
	"flag"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
)

// The plugin's default client-side rate limit. whatif and summary read many resources one after the other
// (a proposal of dozens of CRDs and policies makes a hundred requests or more); client-go's default of 5
// requests per second, burst 10, made such a run wait on the client more than on the server. API Priority
// and Fairness, not the client, protects the API server from a reader, as it does from kubectl's.
const (
	defaultQPS   = 50
	defaultBurst = 100
)

// clientOptions are the flags that shape how the plugin talks to the API server and logs, named as kubectl
// and the celaudit operator name them: --kube-api-qps, --kube-api-burst, -v and --vmodule. One run makes one
// rate limiter and one warning printer, shared by every client the run creates (see wrap).
type clientOptions struct {
	QPS   float32
	Burst int

	errOut io.Writer
	log    *textlogger.Config

	once     sync.Once
	throttle *throttle
	warnings rest.WarningHandler
}

func newClientOptions(errOut io.Writer) *clientOptions {
	return &clientOptions{
		QPS:    defaultQPS,
		Burst:  defaultBurst,
		errOut: errOut,
		log:    textlogger.NewConfig(textlogger.Output(errOut)),
	}
}

// AddFlags adds the flags to fs, -v and --vmodule as kubectl has them.
func (o *clientOptions) AddFlags(fs *pflag.FlagSet) {
	fs.Float32Var(&o.QPS, "kube-api-qps", o.QPS, "Queries per second to the API server, shared by every request of the command.")
	fs.IntVar(&o.Burst, "kube-api-burst", o.Burst, "Burst of queries to the API server above --kube-api-qps.")
	// pflag takes a one-letter Go flag as both -v and --v, as kubectl does.
	goFlags := flag.NewFlagSet("log", flag.ContinueOnError)
	goFlags.Var(o.log.Verbosity(), "v", "number for the log level verbosity")
	goFlags.Var(o.log.VModule(), "vmodule", "comma-separated list of pattern=N settings for file-filtered logging")
	fs.AddGoFlagSet(goFlags)
}

// Validate checks the flags and applies -v to klog's process-wide verbosity as well: client-go decides
// from it whether to trace requests (-v=6 and up) when it builds a transport. The plugin is a process of
// its own, as kubectl is, whose -v sets the same.
func (o *clientOptions) Validate() error {
	if o.QPS <= 0 {
		return BadInput("--kube-api-qps %g: want a positive number", o.QPS)
	}
	if o.Burst < 1 {
		return BadInput("--kube-api-burst %d: want a positive number", o.Burst)
	}
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	return klogFlags.Set("v", o.log.Verbosity().String())
}

// Logger is the logger of a run: klog's text format on the error stream, at the verbosity of -v. client-go
// logs through it what kubectl's logs at the same levels (throttled requests at 3, requests at 6, ...).
func (o *clientOptions) Logger() logr.Logger { return textlogger.NewLogger(o.log) }

// wrap makes every client of the run share one rate limiter and print each warning of the API server
// once on the error stream: the output, written once everything has been read, stays free of them.
func (o *clientOptions) wrap(cfg *rest.Config) *rest.Config {
	o.once.Do(func() {
		o.throttle = &throttle{RateLimiter: flowcontrol.NewTokenBucketRateLimiter(o.QPS, o.Burst)}
		o.warnings = rest.NewWarningWriter(o.errOut, rest.WarningWriterOptions{
			Deduplicate: true,
			Color:       printers.AllowsColorOutput(o.errOut),
		})
	})
	cfg.QPS, cfg.Burst = o.QPS, o.Burst
	cfg.RateLimiter = o.throttle
	cfg.WarningHandler, cfg.WarningHandlerWithContext = o.warnings, nil
	return cfg
}

// logThrottling logs, at the level of client-go's own "Waited before sending request", how many requests of
// the run waited for the client-side rate limiter and for how long in all: what tells whether
// --kube-api-qps and --kube-api-burst hold the command back. Nothing when the run made no client.
func (o *clientOptions) logThrottling(log logr.Logger) {
	if o.throttle == nil {
		return
	}
	t := o.throttle
	log.V(3).Info("Client-side rate limiter", "requests", t.requests.Load(), "waited", t.waited.Load(),
		"waitedFor", time.Duration(t.waitedFor.Load()), "qps", o.QPS, "burst", o.Burst)
}

// throttle is a rate limiter that counts the requests that had to wait for it.
type throttle struct {
	flowcontrol.RateLimiter
	requests  atomic.Int64
	waited    atomic.Int64
	waitedFor atomic.Int64 // nanoseconds
}

// Wait takes a token at once if one is free (TryAccept takes nothing when it fails), and otherwise waits for
// one and counts the wait.
func (t *throttle) Wait(ctx context.Context) error {
	t.requests.Add(1)
	if t.TryAccept() {
		return nil
	}
	t.waited.Add(1)
	start := time.Now()
	err := t.RateLimiter.Wait(ctx)
	t.waitedFor.Add(int64(time.Since(start)))
	return err
}
