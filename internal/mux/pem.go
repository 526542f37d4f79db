package mux

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"fmt"
)

func pemCert(cert *x509.Certificate) []byte {
	return pemCertDER(cert.Raw)
}

func pemCertDER(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func pemKey(key crypto.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
