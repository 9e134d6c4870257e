package framework

import (
	"errors"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Credentials say how a kubeconfig authenticates: a client certificate, or a bearer token.
type Credentials struct {
	CertFile, KeyFile string
	Token             string
}

// WriteKubeconfig writes a kubeconfig for server, trusting caFile, with one user.
func WriteKubeconfig(path, server, caFile string, c Credentials) error {
	if (c.Token == "") == (c.CertFile == "") {
		return errors.New("write kubeconfig: give either a token or a client certificate")
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: caFile}
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{ClientCertificate: c.CertFile, ClientKey: c.KeyFile, Token: c.Token}
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "user"}
	cfg.CurrentContext = "e2e"
	return clientcmd.WriteToFile(*cfg, path)
}
