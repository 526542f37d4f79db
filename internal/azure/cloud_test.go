package azure

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	azfake "github.com/Azure/azure-sdk-for-go/sdk/azcore/fake"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	. "github.com/onsi/gomega"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/azure/metadata"
)

// scopeRecorder is the SDK's fake credential that also remembers the scopes it was asked for.
type scopeRecorder struct {
	azfake.TokenCredential
	mu     sync.Mutex
	scopes []string
}

func (r *scopeRecorder) GetToken(ctx context.Context, opts policy.TokenRequestOptions) (azcore.AccessToken, error) {
	r.mu.Lock()
	r.scopes = append(r.scopes, opts.Scopes...)
	r.mu.Unlock()
	return r.TokenCredential.GetToken(ctx, opts)
}

func (r *scopeRecorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.scopes...)
}

func TestNewWithConfigFillsScopeFromIMDS(t *testing.T) {
	g := NewWithT(t)
	doc := imdsDoc(selfVMID, "cp-0", "1", clusterTags("control-plane"), "10.0.0.4")
	doc["compute"].(map[string]any)["azEnvironment"] = "AzureUSGovernmentCloud"
	srv := newIMDSServer(t, doc)
	f := clusterFakes()
	cred := &scopeRecorder{}
	env := newTestCloud(t, f, func(c *Config) {
		c.SubscriptionID, c.ResourceGroup, c.ClusterUID = "", "", ""
		c.IMDS = testIMDS(srv)
		c.Credential = cred
	}, nil)
	g.Expect(env.cloud.UID(context.Background())).To(Equal(testUID))
	g.Expect(env.cloud.subscriptionID).To(Equal(testSub))
	g.Expect(env.cloud.resourceGroup).To(Equal(testRG))

	got, err := env.cloud.List(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(wantCluster))
	g.Expect(env.route.seenHosts()).To(ConsistOf("management.usgovcloudapi.net"), "the cloud IMDS names")
	g.Expect(cred.seen()).To(ContainElement("https://management.core.usgovcloudapi.net//.default"))
	g.Expect(srv.count()).To(Equal(1))
}

func TestNewFromIMDSRejectsAnEmptyUIDTag(t *testing.T) {
	for name, tagList := range map[string][]tag{
		"no UID tag":    {{DefaultRoleTagKey, "worker"}},
		"empty UID tag": {{DefaultUIDTagKey, "  "}, {DefaultRoleTagKey, "worker"}},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			srv := newIMDSServer(t, imdsDoc(selfVMID, "cp-0", "", tagList, "10.0.0.4"))
			_, err := NewWithConfig(context.Background(), Config{IMDS: testIMDS(srv), Credential: &azfake.TokenCredential{}})
			g.Expect(err).To(MatchError(ContainSubstring(`no (or an empty) "goofy-uid" tag`)))
		})
	}
}

func TestNewFromIMDSFailsWhenIMDSDoes(t *testing.T) {
	g := NewWithT(t)
	srv := newIMDSServer(t, nil).then(status(http.StatusForbidden))
	_, err := NewWithConfig(context.Background(), Config{IMDS: testIMDS(srv), Credential: &azfake.TokenCredential{}})
	g.Expect(err).To(MatchError(ContainSubstring("403 Forbidden")))
}

func TestNewReadsEverythingFromIMDSAndTheEnvironment(t *testing.T) {
	g := NewWithT(t)
	srv := newIMDSServer(t, imdsDoc(selfVMID, "cp-0", "", clusterTags("worker"), "10.0.0.4"))
	t.Setenv(EnvIMDSEndpoint, srv.URL)
	// The default credential chain is built from the AZURE_* variables; building it makes no request.
	t.Setenv("AZURE_TENANT_ID", "00000000-0000-0000-0000-0000000000aa")
	t.Setenv("AZURE_CLIENT_ID", "00000000-0000-0000-0000-0000000000bb")
	t.Setenv("AZURE_CLIENT_SECRET", "not-a-secret")
	c, err := New(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.UID(context.Background())).To(Equal(testUID))
	g.Expect(c.resourceGroup).To(Equal(testRG))
	g.Expect(c.Self(context.Background())).To(HaveField("Name", "cp-0"))
}

func TestCloudSelection(t *testing.T) {
	for name, tc := range map[string]struct {
		spec      CloudSpec
		env       map[string]string
		wantHost  string
		wantScope string
	}{
		"public by default": {wantHost: "management.azure.com", wantScope: "https://management.core.windows.net//.default"},
		"China":             {spec: CloudSpec{Name: CloudChina}, wantHost: "management.chinacloudapi.cn", wantScope: "https://management.core.chinacloudapi.cn//.default"},
		"US Government":     {spec: CloudSpec{Name: CloudUSGovernment}, wantHost: "management.usgovcloudapi.net", wantScope: "https://management.core.usgovcloudapi.net//.default"},
		"custom (ARM emulator or Azure Stack Hub)": {
			spec:     CloudSpec{Name: CloudCustom, ResourceManagerEndpoint: "https://arm.goofy.test:8443", ResourceManagerAudience: "https://arm.goofy.test/", ActiveDirectoryAuthorityHost: "https://login.goofy.test/"},
			wantHost: "arm.goofy.test:8443", wantScope: "https://arm.goofy.test//.default",
		},
		"custom without audience uses the endpoint": {
			spec:     CloudSpec{Name: "custom", ResourceManagerEndpoint: "https://arm.goofy.test"},
			wantHost: "arm.goofy.test", wantScope: "https://arm.goofy.test/.default",
		},
		"AZURE_ENVIRONMENT": {env: map[string]string{EnvEnvironment: "AzureChinaCloud"}, wantHost: "management.chinacloudapi.cn", wantScope: "https://management.core.chinacloudapi.cn//.default"},
		"custom from the environment": {
			env:      map[string]string{EnvResourceManagerEndpoint: "https://stack.goofy.test", EnvResourceManagerAudience: "https://stack-audience.goofy.test"},
			wantHost: "stack.goofy.test", wantScope: "https://stack-audience.goofy.test/.default",
		},
		"the configuration wins over the environment": {
			spec: CloudSpec{Name: CloudUSGovernment}, env: map[string]string{EnvEnvironment: "AzureChinaCloud"},
			wantHost: "management.usgovcloudapi.net", wantScope: "https://management.core.usgovcloudapi.net//.default",
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			for _, k := range []string{EnvEnvironment, EnvResourceManagerEndpoint, EnvResourceManagerAudience, EnvAuthorityHost} {
				t.Setenv(k, tc.env[k])
			}
			cred := &scopeRecorder{}
			env := newTestCloud(t, clusterFakes(), func(c *Config) { c.Cloud = tc.spec; c.Credential = cred }, nil)
			g.Expect(env.cloud.List(context.Background())).To(Equal(wantCluster))
			g.Expect(env.route.seenHosts()).To(ConsistOf(tc.wantHost))
			g.Expect(cred.seen()).To(HaveEach(tc.wantScope))
		})
	}
}

func TestClientOptionsCloudWins(t *testing.T) {
	g := NewWithT(t)
	conf, err := CloudSpec{Name: CloudChina}.Configuration()
	g.Expect(err).NotTo(HaveOccurred())
	env := newTestCloud(t, clusterFakes(), func(c *Config) {
		c.ClientOptions.Cloud = conf
		c.Cloud = CloudSpec{Name: CloudUSGovernment}
	}, nil)
	g.Expect(env.cloud.List(context.Background())).To(HaveLen(len(wantCluster)))
	g.Expect(env.route.seenHosts()).To(ConsistOf("management.chinacloudapi.cn"))
}

func TestARMClientOptionsDefaults(t *testing.T) {
	g := NewWithT(t)
	caller := &arm.ClientOptions{ClientOptions: policy.ClientOptions{Retry: policy.RetryOptions{MaxRetries: 1}}}
	opts, err := armClientOptions(context.Background(), Config{ClientOptions: caller}, false)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(opts.Retry.MaxRetries).To(Equal(int32(1)), "the caller's value stays")
	g.Expect(opts.Retry.RetryDelay).To(Equal(DefaultARMRetry.RetryDelay))
	g.Expect(opts.Retry.MaxRetryDelay).To(Equal(DefaultARMRetry.MaxRetryDelay))
	g.Expect(opts.Retry.TryTimeout).To(Equal(DefaultARMRetry.TryTimeout))
	g.Expect(opts.DisableRPRegistration).To(BeTrue())
	g.Expect(caller.Retry.RetryDelay).To(BeZero(), "the caller's options are not modified")
	g.Expect(caller.DisableRPRegistration).To(BeFalse())
}

func TestSelf(t *testing.T) {
	g := NewWithT(t)
	srv := newIMDSServer(t, imdsDoc(ssVMID("workers", "3"), "Workers000003", "3",
		[]tag{{"GOOFY-ROLE", "worker"}, {DefaultUIDTagKey, testUID}}, "10.1.0.7", "10.1.0.8"))
	env := newTestCloud(t, &fakeAzure{}, func(c *Config) { c.IMDS = testIMDS(srv) }, nil)
	g.Expect(env.cloud.Self(context.Background())).To(Equal(metadata.InstanceMetadata{
		Name: "workers000003", ProviderID: pidPrefix + "virtualMachineScaleSets/workers/virtualMachines/3",
		Role: metadata.RoleWorker, VPCIP: "10.1.0.7", AliasIPRanges: []string{"10.1.0.8/32"}, Zone: "3",
	}))
}

func TestSelfErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		doc  any
		want string
	}{
		"no role tag":      {imdsDoc(selfVMID, "cp-0", "", []tag{{DefaultUIDTagKey, testUID}}, "10.0.0.4"), `tag "goofy-role": empty role`},
		"unknown role":     {imdsDoc(selfVMID, "cp-0", "", []tag{{DefaultRoleTagKey, "boss"}}, "10.0.0.4"), `unknown role "boss"`},
		"no resource ID":   {imdsDoc("", "cp-0", "", clusterTags("worker"), "10.0.0.4"), "no compute.resourceId"},
		"no private IP":    {imdsDoc(selfVMID, "cp-0", "", clusterTags("worker")), "no private IPv4 address"},
		"no compute":       {map[string]any{"network": map[string]any{}}, "no compute section"},
		"no computer name": {imdsDoc(selfVMID, "", "", clusterTags("worker"), "10.0.0.4"), ""},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			if m, ok := tc.doc.(map[string]any); ok && tc.want == "" {
				// IMDS without an OS profile: the VM name is used.
				m["compute"].(map[string]any)["name"] = "VM-From-Name"
				env := newTestCloud(t, &fakeAzure{}, func(c *Config) { c.IMDS = testIMDS(newIMDSServer(t, m)) }, nil)
				g.Expect(env.cloud.Self(context.Background())).To(HaveField("Name", "vm-from-name"))
				return
			}
			env := newTestCloud(t, &fakeAzure{}, func(c *Config) { c.IMDS = testIMDS(newIMDSServer(t, tc.doc)) }, nil)
			_, err := env.cloud.Self(context.Background())
			g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
		})
	}
}

func TestInitSecretHash(t *testing.T) {
	for name, tc := range map[string]struct {
		tags    []tag
		keys    TagKeys
		want    []byte
		wantErr string
	}{
		"default key":          {tags: clusterTags("worker"), want: []byte("sha256:abc")},
		"case-insensitive key": {tags: []tag{{"Goofy-Init-Secret-Hash", "h1"}}, want: []byte("h1")},
		"custom key":           {tags: []tag{{"secret-hash", "h2"}, {DefaultInitSecretHashTagKey, "wrong"}}, keys: TagKeys{InitSecretHash: "secret-hash"}, want: []byte("h2")},
		"missing":              {tags: []tag{{DefaultUIDTagKey, testUID}}, wantErr: `no "goofy-init-secret-hash" tag`},
		"empty":                {tags: []tag{{DefaultInitSecretHashTagKey, ""}}, wantErr: `"goofy-init-secret-hash" tag is empty`},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			srv := newIMDSServer(t, imdsDoc(selfVMID, "cp-0", "", tc.tags, "10.0.0.4"))
			env := newTestCloud(t, &fakeAzure{}, func(c *Config) { c.IMDS = testIMDS(srv); c.TagKeys = tc.keys }, nil)
			got, err := env.cloud.InitSecretHash(context.Background())
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func TestInitSecretHashIMDSDown(t *testing.T) {
	g := NewWithT(t)
	srv := newIMDSServer(t, nil)
	srv.Close()
	env := newTestCloud(t, &fakeAzure{}, func(c *Config) { c.IMDS = testIMDS(srv) }, nil)
	_, err := env.cloud.InitSecretHash(context.Background())
	g.Expect(err).To(MatchError(ContainSubstring("init secret hash: IMDS: request to")))
}
