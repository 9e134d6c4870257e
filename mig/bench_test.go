package mig

import "testing"

func BenchmarkValidate(b *testing.B) {
	m, _ := Lookup("A100-SXM4-40GB")
	layout, _ := ParseLayout("3g.20gb,2g.10gb,1g.5gb,1g.5gb")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Validate(m, layout); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValidatePlaced(b *testing.B) {
	m, _ := Lookup("A100-SXM4-40GB")
	layout, _ := ParseLayout("3g.20gb@4,2g.10gb@0,1g.5gb@2,1g.5gb@3")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Validate(m, layout); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCountLayouts(b *testing.B) {
	m, _ := Lookup("A100-SXM4-40GB")
	b.ReportAllocs()
	for b.Loop() {
		if v, _, err := CountLayouts(m); err != nil || v != 2318 {
			b.Fatal(v, err)
		}
	}
}

func BenchmarkLayouts(b *testing.B) {
	m, _ := Lookup("A100-SXM4-40GB")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Layouts(m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPlan(b *testing.B) {
	m, _ := Lookup("H100 80GB HBM3")
	current := []Instance{At("3g.40gb", 4)}
	req := []string{"1g.10gb", "2g.20gb", "1g.10gb"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Plan(m, current, req); err != nil {
			b.Fatal(err)
		}
	}
}
