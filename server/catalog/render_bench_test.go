package catalog

import "testing"

// BenchmarkRender renders every version of every add-on of the embedded
// catalogue with its first example's values, as the delivery watch does
// for each new generation (server/delivery, desiredAddon).
func BenchmarkRender(b *testing.B) {
	c := loadEmbedded(b)
	type job struct {
		v *Version
		p RenderParams
	}
	var jobs []job
	for _, a := range c.Addons() {
		for _, v := range a.Versions {
			examples, err := v.Examples()
			if err != nil || len(examples) == 0 {
				b.Fatalf("%s: examples: %v, %d", v, err, len(examples))
			}
			p := prod()
			p.Values = examples[0]
			jobs = append(jobs, job{v, p})
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		j := jobs[i%len(jobs)]
		if _, err := j.v.Render(j.p); err != nil {
			b.Fatal(err)
		}
	}
}
