package qwenref

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// TestMTPStandIns checks that without MTP the multimodal layout keeps its
// three mtp.* stand-ins and the text-only layout has none.
func TestMTPStandIns(t *testing.T) {
	causal := TinyQwen35()
	causal.CausalLM = true
	for _, c := range []Qwen35{TinyQwen35(), causal} {
		var got []string
		for _, tn := range c.Tensors() {
			if strings.HasPrefix(tn.Name, mtpPrefix) {
				if tn.Init != "skip" {
					t.Errorf("stand-in %s has init %s", tn.Name, tn.Init)
				}
				got = append(got, tn.Name)
			}
		}
		want := "[mtp.fc.weight mtp.norm.weight mtp.layers.0.self_attn.q_proj.weight]"
		if c.CausalLM {
			want = "[]"
		}
		if fmt.Sprint(got) != want {
			t.Errorf("CausalLM %v: mtp.* tensors %v, want %s", c.CausalLM, got, want)
		}
	}
}

// TestMTP writes tiny checkpoints with the MTP head, loads them back and
// checks the head's tensors, MTPLogits' shape and values, and that
// MTPDraft's first token is the argmax of MTPLogits' last row.
func TestMTP(t *testing.T) {
	causal := TinyQwen35()
	causal.CausalLM = true
	moe := TinyQwen35MoE()
	moe.Stacked = true
	for name, c := range map[string]Qwen35{"multimodal": TinyQwen35(), "causal": causal, "moe-stacked": moe} {
		t.Run(name, func(t *testing.T) {
			plainDir, dir := t.TempDir(), t.TempDir()
			if err := c.Write(plainDir); err != nil {
				t.Fatal(err)
			}
			plain, err := LoadQwen35(plainDir, c)
			if err != nil {
				t.Fatal(err)
			}
			c.MTP = true
			if err := c.Write(dir); err != nil {
				t.Fatal(err)
			}
			m, err := LoadQwen35(dir, c)
			if err != nil {
				t.Fatal(err)
			}
			checkMTPTensors(t, c, m.W)
			// The head is drawn after everything else: the rest keeps its
			// values.
			for n, v := range plain.W {
				if strings.HasPrefix(n, mtpPrefix) {
					continue
				}
				if fmt.Sprint(m.W[n]) != fmt.Sprint(v) {
					t.Errorf("%s differs with MTP", n)
				}
			}

			tokens := []int{5, 17, 3, 88, 42, 9, 60}
			T := len(tokens)
			final, logits := m.Final(tokens), m.Logits(tokens)
			if len(final) != T || len(final[0]) != c.Hidden || len(logits) != T {
				t.Fatalf("Final %dx%d, Logits %d rows", len(final), len(final[0]), len(logits))
			}
			for i := range final {
				if fmt.Sprint(m.head(final[i])) != fmt.Sprint(logits[i]) {
					t.Errorf("Logits[%d] is not lm_head(Final[%d])", i, i)
				}
			}
			mtp := m.MTPLogits(tokens)
			if len(mtp) != T-1 {
				t.Fatalf("MTPLogits has %d rows, want %d", len(mtp), T-1)
			}
			for i, row := range mtp {
				if len(row) != c.Vocab {
					t.Fatalf("MTPLogits[%d] has %d values, want %d", i, len(row), c.Vocab)
				}
				for _, v := range row {
					if math.IsNaN(v) || math.IsInf(v, 0) {
						t.Fatalf("MTPLogits[%d] holds %v", i, v)
					}
				}
			}
			// Causal: a shorter text gives the same leading rows.
			if short := m.MTPLogits(tokens[:4]); fmt.Sprint(short) != fmt.Sprint(mtp[:3]) {
				t.Error("MTPLogits of a prefix differ from the leading rows")
			}
			drafts := m.MTPDraft(tokens, 3)
			if len(drafts) != 3 {
				t.Fatalf("MTPDraft gave %d tokens, want 3", len(drafts))
			}
			if want := argmax(mtp[T-2]); drafts[0] != want {
				t.Errorf("first draft %d, want argmax of the last MTP row %d", drafts[0], want)
			}
			if one := m.MTPDraft(tokens, 1); len(one) != 1 || one[0] != drafts[0] {
				t.Errorf("MTPDraft(k=1) = %v, want [%d]", one, drafts[0])
			}
			for _, d := range drafts {
				if d < 0 || d >= c.Vocab {
					t.Errorf("draft %d out of the vocabulary", d)
				}
			}
			t.Logf("drafts %v", drafts)
		})
	}
}

// checkMTPTensors checks that w holds the MTP head's tensors at their
// sizes (the experts in the layout written), with real values, not the
// stand-ins'.
func checkMTPTensors(t *testing.T, c Qwen35, w Weights) {
	t.Helper()
	H := c.Hidden
	want := map[string]int{
		"mtp.fc.weight":                    H * 2 * H,
		"mtp.pre_fc_norm_embedding.weight": H,
		"mtp.pre_fc_norm_hidden.weight":    H,
		"mtp.norm.weight":                  H,
	}
	for _, tn := range c.layerTensors(mtpLayer, "full_attention", c.sparse(0)) {
		n := 1
		for _, d := range tn.Shape {
			n *= d
		}
		want[tn.Name] = n
	}
	if want["mtp.layers.0.self_attn.q_proj.weight"] != 2*c.Heads*c.HeadDim*H {
		t.Fatal("no gated q_proj in the MTP layer")
	}
	if c.Experts > 0 {
		E, I := c.Experts, c.MoEIntermediate
		if c.Stacked {
			want[mtpLayer+"mlp.experts.gate_up_proj"] = E * 2 * I * H
			want[mtpLayer+"mlp.experts.down_proj"] = E * H * I
		}
		for _, n := range []string{"mlp.gate.weight", "mlp.shared_expert.down_proj.weight", "mlp.shared_expert_gate.weight", "mlp.experts.5.up_proj.weight"} {
			if _, ok := want[mtpLayer+n]; !ok {
				t.Errorf("no %s%s listed", mtpLayer, n)
			}
		}
	} else if _, ok := want[mtpLayer+"mlp.gate_proj.weight"]; !ok {
		t.Errorf("no dense MLP in the MTP layer")
	}
	got := 0
	for n := range w {
		if strings.HasPrefix(n, mtpPrefix) {
			got++
			if _, ok := want[n]; !ok {
				t.Errorf("unexpected tensor %s", n)
			}
		}
	}
	if got != len(want) {
		t.Errorf("%d mtp.* tensors, want %d", got, len(want))
	}
	for n, size := range want {
		v, ok := w[n]
		if !ok {
			t.Errorf("no tensor %s", n)
			continue
		}
		if len(v) != size {
			t.Errorf("%s has %d values, want %d", n, len(v), size)
		}
	}
	// fc's "linear" init, far above the stand-ins' 0.01.
	mx := 0.0
	for _, v := range w["mtp.fc.weight"] {
		mx = math.Max(mx, math.Abs(v))
	}
	if mx < 0.05 {
		t.Errorf("mtp.fc.weight peaks at %g: a stand-in", mx)
	}
}
