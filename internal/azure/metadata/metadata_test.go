package metadata

import "testing"

func TestParseRole(t *testing.T) {
	for in, want := range map[string]Role{
		"control-plane": RoleControlPlane, "ControlPlane": RoleControlPlane, " worker ": RoleWorker, "WORKER": RoleWorker,
	} {
		if got, err := ParseRole(in); err != nil || got != want {
			t.Errorf("ParseRole(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "master", "etcd"} {
		if got, err := ParseRole(bad); err == nil {
			t.Errorf("ParseRole(%q) = %q, want an error", bad, got)
		}
	}
}
