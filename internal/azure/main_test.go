package azure

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The tests choose the cloud and the IMDS endpoint themselves; a developer's shell must not.
	for _, k := range []string{EnvEnvironment, EnvResourceManagerEndpoint, EnvResourceManagerAudience, EnvAuthorityHost, EnvIMDSEndpoint} {
		_ = os.Unsetenv(k)
	}
	goleak.VerifyTestMain(m)
}
