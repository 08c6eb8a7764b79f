// Command celaudit audits the objects stored in a Kubernetes cluster against the CEL and OpenAPI rules the
// cluster declares (CRD validation, ValidatingAdmissionPolicies) and publishes the outcome as PolicyReports.
package main

import (
	"flag"
	"os"

	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/celaudit/celaudit/controllers"
)

func main() {
	opts := controllers.DefaultOptions()
	opts.BindFlags(flag.CommandLine)
	// Errors are logged without stack traces (--zap-stacktrace-level brings them back): celaudit's errors
	// say where they come from, and a trace would show only the controller's goroutine, repeated on every
	// retry of a write while the API server is unreachable.
	zapOpts := zap.Options{Development: false, StacktraceLevel: zapcore.PanicLevel}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()

	logger := zap.New(zap.UseFlagOptions(&zapOpts))
	ctrl.SetLogger(logger)
	klog.SetLogger(logger.WithName("upstream"))
	setupLog := ctrl.Log.WithName("setup")

	op, err := controllers.NewOperator(ctrl.GetConfigOrDie(), opts)
	if err != nil {
		setupLog.Error(err, "Unable to set up the manager")
		os.Exit(1)
	}
	setupLog.Info("Starting celaudit")
	if err := op.Start(ctrl.SetupSignalHandler()); err != nil {
		setupLog.Error(err, "Manager stopped with an error")
		os.Exit(1)
	}
}
