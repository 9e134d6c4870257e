package v1beta1

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func ptr[T any](v T) *T { return &v }

func qty(s string) *resource.Quantity { q := resource.MustParse(s); return &q }

const hdrGPU = "apiVersion: resource.nvidia.com/v1beta1\nkind: GpuConfig\n"
const hdrMIG = "apiVersion: resource.nvidia.com/v1beta1\nkind: MigDeviceConfig\n"

func gpu(s *GpuSharing) *GpuConfig {
	c := NewGpuConfig()
	c.Sharing = s
	return c
}

func migc(s *MigDeviceSharing) *MigDeviceConfig {
	c := NewMigDeviceConfig()
	c.Sharing = s
	return c
}

func interval(i TimeSliceInterval) *TimeSlicingConfig { return &TimeSlicingConfig{Interval: &i} }

// quantityCmp compares quantities by value, so "16Gi" equals "17179869184".
var quantityCmp = cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })

func TestDecode(t *testing.T) {
	const uuid = "GPU-12345678-1234-1234-1234-123456789abc"
	tests := []struct {
		name    string
		in      string
		want    Config
		wantErr string
	}{
		// Seed 000, verbatim parameters of the time-slicing and MPS ResourceClaimTemplates.
		{name: "seed 000 time-slicing", in: hdrGPU + "sharing:\n  strategy: TimeSlicing\n",
			want: gpu(&GpuSharing{Strategy: StrategyTimeSlicing, TimeSlicingConfig: interval(DefaultTimeSlice)})},
		{name: "seed 000 MPS", in: hdrGPU + "sharing:\n  strategy: MPS\n",
			want: gpu(&GpuSharing{Strategy: StrategyMPS, MpsConfig: &MpsConfig{}})},
		{name: "no sharing is exclusive", in: hdrGPU, want: gpu(nil)},
		{name: "json", in: `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Long"}}}`,
			want: gpu(&GpuSharing{Strategy: StrategyTimeSlicing, TimeSlicingConfig: interval(LongTimeSlice)})},
		{name: "interval Default", in: hdrGPU + "sharing:\n  strategy: TimeSlicing\n  timeSlicingConfig:\n    interval: Default\n",
			want: gpu(&GpuSharing{Strategy: StrategyTimeSlicing, TimeSlicingConfig: interval(DefaultTimeSlice)})},
		{name: "interval Short", in: hdrGPU + "sharing:\n  strategy: TimeSlicing\n  timeSlicingConfig:\n    interval: Short\n",
			want: gpu(&GpuSharing{Strategy: StrategyTimeSlicing, TimeSlicingConfig: interval(ShortTimeSlice)})},
		{name: "interval Medium", in: hdrGPU + "sharing:\n  strategy: TimeSlicing\n  timeSlicingConfig:\n    interval: Medium\n",
			want: gpu(&GpuSharing{Strategy: StrategyTimeSlicing, TimeSlicingConfig: interval(MediumTimeSlice)})},
		{name: "empty timeSlicingConfig", in: hdrGPU + "sharing:\n  strategy: TimeSlicing\n  timeSlicingConfig: {}\n",
			want: gpu(&GpuSharing{Strategy: StrategyTimeSlicing, TimeSlicingConfig: interval(DefaultTimeSlice)})},
		{name: "MPS all fields", in: hdrGPU + "sharing:\n  strategy: MPS\n  mpsConfig:\n    defaultActiveThreadPercentage: 50\n    defaultPinnedDeviceMemoryLimit: 10Gi\n    defaultPerDevicePinnedMemoryLimit:\n      \"0\": 4Gi\n      " + uuid + ": 2048Mi\n",
			want: gpu(&GpuSharing{Strategy: StrategyMPS, MpsConfig: &MpsConfig{
				DefaultActiveThreadPercentage:     ptr(50),
				DefaultPinnedDeviceMemoryLimit:    qty("10Gi"),
				DefaultPerDevicePinnedMemoryLimit: map[string]resource.Quantity{"0": *qty("4Gi"), uuid: *qty("2Gi")},
			}})},
		{name: "MPS percentage bounds", in: hdrGPU + "sharing:\n  strategy: MPS\n  mpsConfig:\n    defaultActiveThreadPercentage: 100\n",
			want: gpu(&GpuSharing{Strategy: StrategyMPS, MpsConfig: &MpsConfig{DefaultActiveThreadPercentage: ptr(100)}})},
		{name: "MPS limit as number", in: hdrGPU + "sharing:\n  strategy: MPS\n  mpsConfig:\n    defaultPinnedDeviceMemoryLimit: 1048576\n",
			want: gpu(&GpuSharing{Strategy: StrategyMPS, MpsConfig: &MpsConfig{DefaultPinnedDeviceMemoryLimit: qty("1Mi")}})},
		{name: "MIG MPS", in: hdrMIG + "sharing:\n  strategy: MPS\n  mpsConfig:\n    defaultActiveThreadPercentage: 1\n",
			want: migc(&MigDeviceSharing{Strategy: StrategyMPS, MpsConfig: &MpsConfig{DefaultActiveThreadPercentage: ptr(1)}})},
		{name: "MIG exclusive", in: hdrMIG, want: migc(nil)},

		// Seed 002: v1alpha1 field names that kept their meaning are accepted.
		{name: "old timeSlice", in: hdrGPU + "sharing:\n  strategy: TimeSlicing\n  timeSlicingConfig:\n    timeSlice: Short\n",
			want: gpu(&GpuSharing{Strategy: StrategyTimeSlicing, TimeSlicingConfig: interval(ShortTimeSlice)})},
		{name: "old MPS names", in: hdrGPU + "sharing:\n  strategy: MPS\n  mpsConfig:\n    activeThreadPercentage: 20\n    pinnedDeviceMemoryLimit: 1Gi\n",
			want: gpu(&GpuSharing{Strategy: StrategyMPS, MpsConfig: &MpsConfig{DefaultActiveThreadPercentage: ptr(20), DefaultPinnedDeviceMemoryLimit: qty("1Gi")}})},
		{name: "old and new interval", in: hdrGPU + "sharing:\n  strategy: TimeSlicing\n  timeSlicingConfig:\n    timeSlice: Short\n    interval: Long\n",
			wantErr: `invalid GpuConfig: sharing.timeSlicingConfig.timeSlice: Forbidden: timeSlice is the old name of interval; set only interval`},
		{name: "old and new percentage", in: hdrGPU + "sharing:\n  strategy: MPS\n  mpsConfig:\n    activeThreadPercentage: 20\n    defaultActiveThreadPercentage: 20\n",
			wantErr: `invalid GpuConfig: sharing.mpsConfig.activeThreadPercentage: Forbidden: activeThreadPercentage is the old name of defaultActiveThreadPercentage; set only defaultActiveThreadPercentage`},
		{name: "old and new limit", in: hdrGPU + "sharing:\n  strategy: MPS\n  mpsConfig:\n    pinnedDeviceMemoryLimit: 1Gi\n    defaultPinnedDeviceMemoryLimit: 1Gi\n",
			wantErr: `invalid GpuConfig: sharing.mpsConfig.pinnedDeviceMemoryLimit: Forbidden: pinnedDeviceMemoryLimit is the old name of defaultPinnedDeviceMemoryLimit; set only defaultPinnedDeviceMemoryLimit`},
		{name: "old maxConnections", in: hdrGPU + "sharing:\n  strategy: MPS\n  mpsConfig:\n    maxConnections: 4\n",
			wantErr: `invalid GpuConfig: sharing.mpsConfig.maxConnections: Forbidden: not supported in resource.nvidia.com/v1beta1: the MPS client limit is fixed by the GPU (48 clients, 16 before Volta); remove the field`},
		{name: "old apiVersion", in: "apiVersion: gpu.resource.nvidia.com/v1alpha1\nkind: GpuClaimParameters\nspec:\n  count: 1\n  sharing:\n    strategy: MPS\n",
			wantErr: `apiVersion: Unsupported value: "gpu.resource.nvidia.com/v1alpha1": GpuClaimParameters "gpu.resource.nvidia.com/v1alpha1" is the classic-DRA parameters API; write apiVersion "resource.nvidia.com/v1beta1" with kind "GpuConfig" in the claim's opaque config (device counts and selection belong in the claim's requests)`},
		{name: "old MIG apiVersion", in: "apiVersion: gpu.resource.nvidia.com/v1alpha1\nkind: MigDeviceClaimParameters\n",
			wantErr: `apiVersion: Unsupported value: "gpu.resource.nvidia.com/v1alpha1": MigDeviceClaimParameters "gpu.resource.nvidia.com/v1alpha1" is the classic-DRA parameters API; write apiVersion "resource.nvidia.com/v1beta1" with kind "MigDeviceConfig" in the claim's opaque config (device counts and selection belong in the claim's requests)`},

		// Invalid values, one per field.
		{name: "bad interval", in: hdrGPU + "sharing:\n  strategy: TimeSlicing\n  timeSlicingConfig:\n    interval: Fast\n",
			wantErr: `invalid GpuConfig: sharing.timeSlicingConfig.interval: Unsupported value: "Fast": supported values: "Default", "Long", "Medium", "Short"`},
		{name: "interval wrong case", in: hdrGPU + "sharing:\n  strategy: TimeSlicing\n  timeSlicingConfig:\n    interval: short\n",
			wantErr: `invalid GpuConfig: sharing.timeSlicingConfig.interval: Unsupported value: "short": supported values: "Default", "Long", "Medium", "Short"`},
		{name: "interval number", in: hdrGPU + "sharing:\n  strategy: TimeSlicing\n  timeSlicingConfig:\n    interval: 2\n",
			wantErr: `sharing.timeSlicingConfig.interval: Invalid value: got a JSON number, must be a string`},
		{name: "bad strategy", in: hdrGPU + "sharing:\n  strategy: Exclusive\n",
			wantErr: `invalid GpuConfig: sharing.strategy: Unsupported value: "Exclusive": supported values: "MPS", "TimeSlicing"`},
		{name: "missing strategy", in: hdrGPU + "sharing:\n  timeSlicingConfig:\n    interval: Long\n",
			wantErr: `invalid GpuConfig: sharing.strategy: Required value: supported values: "MPS", "TimeSlicing"`},
		{name: "MIG time-slicing interval", in: hdrMIG + "sharing:\n  strategy: TimeSlicing\n  timeSlicingConfig:\n    interval: Long\n",
			wantErr: `invalid MigDeviceConfig: sharing.timeSlicingConfig: Forbidden: the time-slice interval is set per physical GPU and cannot be set for a MIG device (use a GpuConfig on a full GPU)`},
		{name: "MIG time-slicing with mpsConfig", in: hdrMIG + "sharing:\n  strategy: TimeSlicing\n  mpsConfig:\n    defaultActiveThreadPercentage: 50\n",
			wantErr: `invalid MigDeviceConfig: sharing.mpsConfig: Forbidden: may only be set when strategy is MPS`},
		{name: "MIG missing strategy", in: hdrMIG + "sharing: {}\n",
			wantErr: `invalid MigDeviceConfig: sharing.strategy: Required value: supported values: "MPS"`},
		{name: "MIG bad strategy", in: hdrMIG + "sharing:\n  strategy: mps\n",
			wantErr: `invalid MigDeviceConfig: sharing.strategy: Unsupported value: "mps": supported values: "MPS"`},
		{name: "MIG timeSlicingConfig", in: hdrMIG + "sharing:\n  strategy: MPS\n  timeSlicingConfig: {}\n",
			wantErr: `invalid MigDeviceConfig: sharing.timeSlicingConfig: Forbidden: the time-slice interval is set per physical GPU and cannot be set for a MIG device (use a GpuConfig on a full GPU)`},
		{name: "mpsConfig with TimeSlicing", in: hdrGPU + "sharing:\n  strategy: TimeSlicing\n  mpsConfig: {}\n",
			wantErr: `invalid GpuConfig: sharing.mpsConfig: Forbidden: may only be set when strategy is MPS`},
		{name: "timeSlicingConfig with MPS", in: hdrGPU + "sharing:\n  strategy: MPS\n  timeSlicingConfig: {}\n",
			wantErr: `invalid GpuConfig: sharing.timeSlicingConfig: Forbidden: may only be set when strategy is TimeSlicing`},
		{name: "percentage 0", in: hdrGPU + "sharing:\n  strategy: MPS\n  mpsConfig:\n    defaultActiveThreadPercentage: 0\n",
			wantErr: `invalid GpuConfig: sharing.mpsConfig.defaultActiveThreadPercentage: Invalid value: 0: must be between 1 and 100`},
		{name: "percentage 101", in: hdrGPU + "sharing:\n  strategy: MPS\n  mpsConfig:\n    defaultActiveThreadPercentage: 101\n",
			wantErr: `invalid GpuConfig: sharing.mpsConfig.defaultActiveThreadPercentage: Invalid value: 101: must be between 1 and 100`},
		{name: "percentage string", in: hdrGPU + "sharing:\n  strategy: MPS\n  mpsConfig:\n    defaultActiveThreadPercentage: half\n",
			wantErr: `sharing.mpsConfig.defaultActiveThreadPercentage: Invalid value: got a JSON string, must be an integer`},
		{name: "percentage fraction", in: hdrGPU + "sharing:\n  strategy: MPS\n  mpsConfig:\n    defaultActiveThreadPercentage: 50.5\n",
			wantErr: `sharing.mpsConfig.defaultActiveThreadPercentage: Invalid value: got a JSON number 50.5, must be an integer`},
		{name: "limit too small", in: hdrGPU + "sharing:\n  strategy: MPS\n  mpsConfig:\n    defaultPinnedDeviceMemoryLimit: 1023Ki\n",
			wantErr: `invalid GpuConfig: sharing.mpsConfig.defaultPinnedDeviceMemoryLimit: Invalid value: "1023Ki": must be at least 1Mi`},
		{name: "limit negative", in: hdrGPU + "sharing:\n  strategy: MPS\n  mpsConfig:\n    defaultPinnedDeviceMemoryLimit: -1Gi\n",
			wantErr: `invalid GpuConfig: sharing.mpsConfig.defaultPinnedDeviceMemoryLimit: Invalid value: "-1Gi": must be at least 1Mi`},
		{name: "limit too big", in: hdrGPU + "sharing:\n  strategy: MPS\n  mpsConfig:\n    defaultPinnedDeviceMemoryLimit: 2Pi\n",
			wantErr: `invalid GpuConfig: sharing.mpsConfig.defaultPinnedDeviceMemoryLimit: Invalid value: "2Pi": must be at most 1Pi`},
		{name: "limit not a quantity", in: hdrGPU + "sharing:\n  strategy: MPS\n  mpsConfig:\n    defaultPinnedDeviceMemoryLimit: 16GB\n",
			wantErr: `sharing.mpsConfig.defaultPinnedDeviceMemoryLimit: Invalid value: "16GB": must be a quantity, such as 16Gi or 512Mi`},
		{name: "per-device bad key", in: hdrGPU + "sharing:\n  strategy: MPS\n  mpsConfig:\n    defaultPerDevicePinnedMemoryLimit:\n      gpu0: 1Gi\n",
			wantErr: `invalid GpuConfig: sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit: Invalid value: "gpu0": must be a device UUID (GPU-<uuid> or MIG-<uuid>) or a device index 0..1023`},
		{name: "per-device index too big", in: hdrGPU + "sharing:\n  strategy: MPS\n  mpsConfig:\n    defaultPerDevicePinnedMemoryLimit:\n      \"1024\": 1Gi\n",
			wantErr: `invalid GpuConfig: sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit: Invalid value: "1024": must be a device UUID (GPU-<uuid> or MIG-<uuid>) or a device index 0..1023`},
		{name: "per-device leading zero", in: hdrGPU + "sharing:\n  strategy: MPS\n  mpsConfig:\n    defaultPerDevicePinnedMemoryLimit:\n      \"01\": 1Gi\n",
			wantErr: `invalid GpuConfig: sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit: Invalid value: "01": must be a device UUID (GPU-<uuid> or MIG-<uuid>) or a device index 0..1023`},
		{name: "per-device small value", in: hdrGPU + "sharing:\n  strategy: MPS\n  mpsConfig:\n    defaultPerDevicePinnedMemoryLimit:\n      \"0\": 1Ki\n",
			wantErr: `invalid GpuConfig: sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit[0]: Invalid value: "1Ki": must be at least 1Mi`},
		{name: "per-device bad quantity", in: hdrGPU + "sharing:\n  strategy: MPS\n  mpsConfig:\n    defaultPerDevicePinnedMemoryLimit:\n      \"0\": lots\n",
			wantErr: `sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit[0]: Invalid value: "lots": must be a quantity, such as 16Gi or 512Mi`},
		{name: "two errors", in: hdrGPU + "sharing:\n  strategy: MPS\n  mpsConfig:\n    defaultActiveThreadPercentage: 0\n    defaultPinnedDeviceMemoryLimit: 1Ki\n",
			wantErr: `invalid GpuConfig: [sharing.mpsConfig.defaultActiveThreadPercentage: Invalid value: 0: must be between 1 and 100, sharing.mpsConfig.defaultPinnedDeviceMemoryLimit: Invalid value: "1Ki": must be at least 1Mi]`},

		// Unknown fields, kinds and versions.
		{name: "unknown field", in: hdrGPU + "sharing:\n  strategy: MPS\n  replicas: 4\n",
			wantErr: `strict decoding error: unknown field "sharing.replicas": allowed fields of GpuConfig: apiVersion, kind, sharing.strategy, sharing.timeSlicingConfig.interval, sharing.mpsConfig.defaultActiveThreadPercentage, sharing.mpsConfig.defaultPinnedDeviceMemoryLimit, sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit`},
		{name: "wrong case field", in: hdrGPU + "Sharing:\n  strategy: MPS\n",
			wantErr: `strict decoding error: unknown field "Sharing": allowed fields`},
		{name: "duplicate field json", in: `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","strategy":"TimeSlicing"}}`,
			wantErr: `strict decoding error: duplicate field "sharing.strategy"`},
		{name: "device-plugin style config", in: hdrGPU + "sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n",
			wantErr: `strict decoding error: unknown field "sharing.timeSlicing"`},
		{name: "metadata", in: hdrGPU + "metadata:\n  name: x\n",
			wantErr: `strict decoding error: unknown field "metadata"`},
		{name: "unknown kind", in: "apiVersion: resource.nvidia.com/v1beta1\nkind: VfioDeviceConfig\n",
			wantErr: `kind: Unsupported value: "VfioDeviceConfig": supported values: "GpuConfig", "MigDeviceConfig"`},
		{name: "unknown version", in: "apiVersion: resource.nvidia.com/v1\nkind: GpuConfig\n",
			wantErr: `apiVersion: Unsupported value: "resource.nvidia.com/v1": supported values: "resource.nvidia.com/v1beta1"`},
		{name: "missing kind", in: "apiVersion: resource.nvidia.com/v1beta1\n",
			wantErr: `kind: Required value: expected apiVersion "resource.nvidia.com/v1beta1" with kind "GpuConfig" or "MigDeviceConfig"`},
		{name: "missing apiVersion", in: "kind: GpuConfig\n",
			wantErr: `apiVersion: Required value: expected apiVersion "resource.nvidia.com/v1beta1" with kind "GpuConfig" or "MigDeviceConfig"`},
		{name: "empty", in: "  \n", wantErr: `empty configuration: expected apiVersion "resource.nvidia.com/v1beta1" with kind "GpuConfig" or "MigDeviceConfig"`},
		{name: "not an object", in: "[1]", wantErr: `decoding apiVersion "resource.nvidia.com/v1beta1" with kind "GpuConfig" or "MigDeviceConfig": couldn't get version/kind`},
		{name: "sharing not an object", in: hdrGPU + "sharing: MPS\n", wantErr: `sharing: Invalid value: got a JSON string, must be an object`},
	}
	d := NewDecoder()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := d.Decode([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("Decode succeeded with %+v, want error %q", got, tt.wantErr)
				}
				if !strings.HasPrefix(err.Error(), tt.wantErr) {
					t.Fatalf("Decode error\n got: %v\nwant: %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if diff := cmp.Diff(tt.want, got, quantityCmp); diff != "" {
				t.Errorf("Decode (-want +got):\n%s", diff)
			}
			// Round trip: encoding and decoding again gives the same config.
			data, err := d.Encode(got)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			again, err := d.Decode(data)
			if err != nil {
				t.Fatalf("Decode(Encode(x)) of %s: %v", data, err)
			}
			if diff := cmp.Diff(got, again, quantityCmp); diff != "" {
				t.Errorf("round trip through %s (-first +second):\n%s", data, diff)
			}
		})
	}
}

func TestDecodeRaw(t *testing.T) {
	d := NewDecoder()
	raw := runtime.RawExtension{Raw: []byte(`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":0}}}`)}
	_, err := d.DecodeRawAt(raw, field.NewPath("spec", "devices", "config").Index(2).Child("opaque", "parameters"))
	want := `invalid GpuConfig: spec.devices.config[2].opaque.parameters.sharing.mpsConfig.defaultActiveThreadPercentage: Invalid value: 0: must be between 1 and 100`
	if err == nil || err.Error() != want {
		t.Errorf("DecodeRawAt error\n got: %v\nwant: %s", err, want)
	}

	// An already decoded object is copied, defaulted and validated.
	in := gpu(&GpuSharing{Strategy: StrategyTimeSlicing})
	got, err := d.DecodeRaw(runtime.RawExtension{Object: in})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(gpu(&GpuSharing{Strategy: StrategyTimeSlicing, TimeSlicingConfig: interval(DefaultTimeSlice)}), got); diff != "" {
		t.Errorf("DecodeRaw(Object) (-want +got):\n%s", diff)
	}
	if in.Sharing.TimeSlicingConfig != nil {
		t.Errorf("DecodeRaw modified its input")
	}
	if _, err := d.DecodeRaw(runtime.RawExtension{Object: &runtime.Unknown{}}); err == nil {
		t.Errorf("DecodeRaw(Unknown) succeeded")
	}
}

func TestNonStrict(t *testing.T) {
	in := hdrGPU + "sharing:\n  strategy: MPS\n  futureField: 1\n"
	if _, err := NewDecoder().Decode([]byte(in)); err == nil {
		t.Fatal("strict decoder accepted an unknown field")
	}
	got, err := NewDecoder(NonStrict()).Decode([]byte(in))
	if err != nil {
		t.Fatalf("non-strict decoder: %v", err)
	}
	if got.Strategy() != StrategyMPS {
		t.Errorf("Strategy() = %q, want MPS", got.Strategy())
	}
}

func TestDeepCopy(t *testing.T) {
	in := gpu(&GpuSharing{Strategy: StrategyMPS, MpsConfig: &MpsConfig{
		DefaultActiveThreadPercentage:     ptr(10),
		DefaultPinnedDeviceMemoryLimit:    qty("1Gi"),
		DefaultPerDevicePinnedMemoryLimit: map[string]resource.Quantity{"0": *qty("2Gi")},
		ActiveThreadPercentage:            ptr(1), PinnedDeviceMemoryLimit: qty("1Mi"), MaxConnections: ptr(3),
	}, TimeSlicingConfig: &TimeSlicingConfig{Interval: ptr(LongTimeSlice), TimeSlice: ptr(ShortTimeSlice)}})
	out := in.DeepCopyObject().(*GpuConfig)
	if diff := cmp.Diff(in, out); diff != "" {
		t.Fatalf("DeepCopy differs (-in +out):\n%s", diff)
	}
	*out.Sharing.MpsConfig.DefaultActiveThreadPercentage = 99
	out.Sharing.MpsConfig.DefaultPerDevicePinnedMemoryLimit["1"] = *qty("1Gi")
	*out.Sharing.TimeSlicingConfig.Interval = ShortTimeSlice
	if *in.Sharing.MpsConfig.DefaultActiveThreadPercentage != 10 || len(in.Sharing.MpsConfig.DefaultPerDevicePinnedMemoryLimit) != 1 ||
		*in.Sharing.TimeSlicingConfig.Interval != LongTimeSlice {
		t.Errorf("changing the copy changed the original: %+v", in.Sharing)
	}
	m := migc(&MigDeviceSharing{Strategy: StrategyMPS, MpsConfig: &MpsConfig{DefaultActiveThreadPercentage: ptr(5)}})
	mc := m.DeepCopyObject().(*MigDeviceConfig)
	if diff := cmp.Diff(m, mc); diff != "" {
		t.Fatalf("DeepCopy differs (-in +out):\n%s", diff)
	}
	*mc.Sharing.MpsConfig.DefaultActiveThreadPercentage = 6
	if *m.Sharing.MpsConfig.DefaultActiveThreadPercentage != 5 {
		t.Errorf("changing the MIG copy changed the original")
	}
	var nilCfg *GpuConfig
	if nilCfg.DeepCopy() != nil {
		t.Errorf("nil DeepCopy not nil")
	}
}

func TestIntervalInt(t *testing.T) {
	for in, want := range map[TimeSliceInterval]int{DefaultTimeSlice: 0, ShortTimeSlice: 1, MediumTimeSlice: 2, LongTimeSlice: 3, "Fast": -1} {
		if got := in.Int(); got != want {
			t.Errorf("%q.Int() = %d, want %d", in, got, want)
		}
	}
}

func TestLimitMiB(t *testing.T) {
	for in, want := range map[string]int64{"1Mi": 1, "16Gi": 16384, "1.5Mi": 1, "1536Ki": 1, "2097151": 1, "1G": 953, "1Pi": 1 << 30} {
		got, err := LimitMiB(resource.MustParse(in))
		if err != nil || got != want {
			t.Errorf("LimitMiB(%s) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"0", "-1Mi", "1048575", "1025Ti"} {
		if got, err := LimitMiB(resource.MustParse(in)); err == nil {
			t.Errorf("LimitMiB(%s) = %d, want error", in, got)
		}
	}
	if got := FormatLimit(16384); got != "16384M" {
		t.Errorf("FormatLimit = %q", got)
	}
}

func TestParseDeviceKey(t *testing.T) {
	tests := []struct {
		key   string
		uuid  string
		index int
		ok    bool
	}{
		{"0", "", 0, true}, {"7", "", 7, true}, {"1023", "", 1023, true},
		{"GPU-12345678-1234-1234-1234-123456789ABC", "GPU-12345678-1234-1234-1234-123456789ABC", -1, true},
		{"MIG-12345678-1234-1234-1234-123456789abc", "MIG-12345678-1234-1234-1234-123456789abc", -1, true},
		{"MIG-GPU-12345678-1234-1234-1234-123456789abc/1/0", "MIG-GPU-12345678-1234-1234-1234-123456789abc/1/0", -1, true},
		{"-1", "", -1, false}, {"+1", "", -1, false}, {"1024", "", -1, false}, {"", "", -1, false},
		{"GPU-1234", "", -1, false}, {"gpu-12345678-1234-1234-1234-123456789abc", "", -1, false},
	}
	for _, tt := range tests {
		uuid, index, err := ParseDeviceKey(tt.key)
		if (err == nil) != tt.ok || uuid != tt.uuid || index != tt.index {
			t.Errorf("ParseDeviceKey(%q) = %q, %d, %v; want %q, %d, ok=%v", tt.key, uuid, index, err, tt.uuid, tt.index, tt.ok)
		}
	}
}

func TestValidateGoObjects(t *testing.T) {
	// Objects built in Go get their TypeMeta from Default.
	c := &GpuConfig{Sharing: &GpuSharing{Strategy: StrategyMPS}}
	c.Default()
	if err := c.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	bad := &MigDeviceConfig{}
	bad.Kind = GpuConfigKind
	want := `[apiVersion: Unsupported value: "": supported values: "resource.nvidia.com/v1beta1", kind: Unsupported value: "GpuConfig": supported values: "MigDeviceConfig"]`
	if err := bad.Validate(); err == nil || err.Error() != want {
		t.Errorf("Validate error\n got: %v\nwant: %s", err, want)
	}
}

func TestAccessors(t *testing.T) {
	ts := gpu(&GpuSharing{Strategy: StrategyTimeSlicing})
	mps := gpu(&GpuSharing{Strategy: StrategyMPS, MpsConfig: &MpsConfig{}})
	tests := []struct {
		c        Config
		strategy SharingStrategy
		hasMPS   bool
	}{
		{gpu(nil), StrategyExclusive, false}, {ts, StrategyTimeSlicing, false}, {mps, StrategyMPS, true},
		{migc(nil), StrategyExclusive, false}, {migc(&MigDeviceSharing{Strategy: StrategyMPS, MpsConfig: &MpsConfig{}}), StrategyMPS, true},
	}
	for i, tt := range tests {
		if got := tt.c.Strategy(); got != tt.strategy {
			t.Errorf("%d: Strategy() = %q, want %q", i, got, tt.strategy)
		}
		if got := tt.c.MPS() != nil; got != tt.hasMPS {
			t.Errorf("%d: MPS() != nil is %v, want %v", i, got, tt.hasMPS)
		}
	}
	if got := ts.Interval(); got != DefaultTimeSlice {
		t.Errorf("Interval() of TimeSlicing without config = %q", got)
	}
	if got := mps.Interval(); got != "" {
		t.Errorf("Interval() of MPS = %q", got)
	}
}

// TestMIGTimeSlicingAsNVIDIADriverDefault: NVIDIA's DRA driver accepts (and defaults to) a
// MigDeviceConfig with strategy TimeSlicing; manifests written for it must decode unchanged.
func TestMIGTimeSlicingAsNVIDIADriverDefault(t *testing.T) {
	d := NewDecoder()
	cfg, err := d.Decode([]byte("apiVersion: resource.nvidia.com/v1beta1\nkind: MigDeviceConfig\nsharing:\n  strategy: TimeSlicing\n"))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if got := cfg.Strategy(); got != StrategyTimeSlicing {
		t.Errorf("strategy = %q, want TimeSlicing", got)
	}
}
