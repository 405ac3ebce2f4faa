package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// runColors tell the runs apart (1 replica, 2 replicas).
var runColors = []color.RGBA{{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, {R: 0xd6, G: 0x27, B: 0x28, A: 0xff}}

// writePNG draws two panels over the load's time: the SDK calls' p50 and
// p99 per sample interval (log scale), and the process's RSS and live
// heap; one color per run.
func writePNG(path string, rs []*result) error {
	lat := plot.New()
	lat.Title.Text = "SDK call latency per interval (all operations)"
	lat.X.Label.Text = "time since the load started (s)"
	lat.Y.Label.Text = "ms"
	lat.Y.Scale = plot.LogScale{}
	lat.Y.Tick.Marker = decadeTicks{}
	lat.X.Min = 0
	lat.Legend.Top = true
	lat.Legend.Left = true
	lat.Add(plotter.NewGrid())

	mem := plot.New()
	mem.Title.Text = "memory of saltbush (the process: etcd ×3, replicas, clients, agents; with -apart the replicas')"
	mem.X.Label.Text = "time since the load started (s)"
	mem.Y.Label.Text = "MiB"
	mem.Y.Min = 0
	mem.X.Min = 0
	mem.Legend.Top = true
	mem.Legend.Left = true
	mem.Add(plotter.NewGrid())

	dashed := []vg.Length{vg.Points(5), vg.Points(3)}
	var maxLat, maxMem float64
	for i, r := range rs {
		col := runColors[i%len(runColors)]
		name := r.label()
		var p50, p99, rss, heap plotter.XYs
		for _, s := range r.samples {
			t := s.At.Seconds()
			if s.At > 0 && s.SDKOps > 0 {
				p50 = append(p50, plotter.XY{X: t, Y: ms2(s.P50)})
				p99 = append(p99, plotter.XY{X: t, Y: ms2(s.P99)})
			}
			maxLat = max(maxLat, ms2(s.P99))
			maxMem = max(maxMem, mib(s.RSS))
			rss = append(rss, plotter.XY{X: t, Y: mib(s.RSS)})
			heap = append(heap, plotter.XY{X: t, Y: mib(s.HeapLive)})
		}
		if err := addLine(lat, p50, col, nil, name+" p50"); err != nil {
			return err
		}
		if err := addLine(lat, p99, col, dashed, name+" p99"); err != nil {
			return err
		}
		if err := addLine(mem, rss, col, nil, name+" RSS"); err != nil {
			return err
		}
		if err := addLine(mem, heap, col, dashed, name+" live heap"); err != nil {
			return err
		}
	}

	// Headroom above the lines for the legends.
	if maxLat > 0 {
		lat.Y.Max = maxLat * 4
	}
	mem.Y.Max = maxMem * 1.3

	const width, height = 9 * vg.Inch, 7 * vg.Inch
	img := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(96))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(12), PadY: vg.Points(18)}
	canvases := plot.Align([][]*plot.Plot{{lat}, {mem}}, tiles, dc)
	lat.Draw(canvases[0][0])
	mem.Draw(canvases[1][0])
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

func addLine(p *plot.Plot, xys plotter.XYs, col color.Color, dashes []vg.Length, name string) error {
	if len(xys) == 0 {
		return nil
	}
	l, err := plotter.NewLine(xys)
	if err != nil {
		return fmt.Errorf("plot %s: %w", name, err)
	}
	l.Color = col
	l.Width = vg.Points(1.5)
	l.Dashes = dashes
	p.Add(l)
	p.Legend.Add(name, l)
	return nil
}

// decadeTicks labels 1, 2 and 5 of every decade of a log axis (gonum's
// LogTicks labels only powers of ten, too few for a latency range).
type decadeTicks struct{}

func (decadeTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for dec := math.Pow(10, math.Floor(math.Log10(lo))); dec <= hi; dec *= 10 {
		for _, m := range []float64{1, 2, 5} {
			if v := m * dec; v >= lo && v <= hi {
				ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', -1, 64)})
			}
		}
		for m := 3.0; m < 10; m++ {
			if v := m * dec; m != 5 && v >= lo && v <= hi {
				ticks = append(ticks, plot.Tick{Value: v}) // minor
			}
		}
	}
	return ticks
}
