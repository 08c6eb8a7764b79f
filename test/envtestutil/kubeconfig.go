package envtestutil

import (
	"path/filepath"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// KubeconfigFile writes a kubeconfig that authenticates as the identity (its token only) in the test's
// temporary directory and returns its path, for a celaudit binary run as the ServiceAccount an install
// creates.
func (i Identity) KubeconfigFile(t testing.TB) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["envtest"] = &clientcmdapi.Cluster{
		Server:                   i.Config.Host,
		CertificateAuthorityData: i.Config.CAData,
	}
	cfg.AuthInfos[i.Name] = &clientcmdapi.AuthInfo{Token: i.Config.BearerToken}
	cfg.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: i.Name, Namespace: i.Namespace}
	cfg.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatalf("writing the kubeconfig of %s: %v", i, err)
	}
	return path
}
