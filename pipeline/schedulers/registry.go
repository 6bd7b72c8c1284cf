package schedulers

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/tputool/tputool/internal/errs"
)

type factory func(class string, cfg Config) (Scheduler, error)

// registry maps diffusers class names to constructors.
var registry = map[string]factory{
	"DDIMScheduler":                      newDDIM,
	"DDIMParallelScheduler":              newDDIM,
	"DDIMInverseScheduler":               newDDIM,
	"DDPMScheduler":                      newDDPM,
	"DDPMParallelScheduler":              newDDPM,
	"PNDMScheduler":                      newPNDM,
	"EulerDiscreteScheduler":             newEuler,
	"EulerAncestralDiscreteScheduler":    newEuler,
	"LMSDiscreteScheduler":               newLMS,
	"HeunDiscreteScheduler":              newHeun,
	"DPMSolverMultistepScheduler":        newDPMMultistep,
	"DPMSolverMultistepInverseScheduler": newDPMMultistep,
	"DPMSolverSinglestepScheduler":       newDPMSinglestep,
	"DEISMultistepScheduler":             newDEIS,
	"UniPCMultistepScheduler":            newUniPC,
	"LCMScheduler":                       newLCM,
	"TCDScheduler":                       newLCM,
	"FlowMatchEulerDiscreteScheduler":    newFlowMatch,
	"FlowMatchHeunDiscreteScheduler":     newFlowMatch,
	"KDPM2DiscreteScheduler":             newKDPM2,
	"KDPM2AncestralDiscreteScheduler":    newKDPM2,
	"EDMEulerScheduler":                  newEDMEuler,
	"EDMDPMSolverMultistepScheduler":     newEDMDPM,
	"CMStochasticIterativeScheduler":     newConsistency,
	"IPNDMScheduler":                     newIPNDM,
	"UnCLIPScheduler":                    newUnCLIP,
	"ScoreSdeVeScheduler":                newScoreSdeVe,
	"FlowMapEulerDiscreteScheduler":      newFlowMap,
	"SASolverScheduler":                  newSASolver,
}

// hasBeginIndex says, for every registered class, whether its diffusers
// class defines set_begin_index (diffusers 58eb52c). Pipelines call it
// guarded by hasattr, so it is a no-op for the classes marked false.
var hasBeginIndex = map[string]bool{
	"DDIMScheduler":                      false,
	"DDIMParallelScheduler":              false,
	"DDIMInverseScheduler":               false,
	"DDPMScheduler":                      false,
	"DDPMParallelScheduler":              false,
	"PNDMScheduler":                      false,
	"EulerDiscreteScheduler":             true,
	"EulerAncestralDiscreteScheduler":    true,
	"LMSDiscreteScheduler":               true,
	"HeunDiscreteScheduler":              true,
	"DPMSolverMultistepScheduler":        true,
	"DPMSolverMultistepInverseScheduler": false,
	"DPMSolverSinglestepScheduler":       true,
	"DEISMultistepScheduler":             true,
	"UniPCMultistepScheduler":            true,
	"LCMScheduler":                       true,
	"TCDScheduler":                       true,
	"FlowMatchEulerDiscreteScheduler":    true,
	"FlowMatchHeunDiscreteScheduler":     true,
	"KDPM2DiscreteScheduler":             true,
	"KDPM2AncestralDiscreteScheduler":    true,
	"EDMEulerScheduler":                  true,
	"EDMDPMSolverMultistepScheduler":     true,
	"CMStochasticIterativeScheduler":     true,
	"IPNDMScheduler":                     true,
	"UnCLIPScheduler":                    false,
	"ScoreSdeVeScheduler":                false,
	"FlowMapEulerDiscreteScheduler":      true,
	"SASolverScheduler":                  true,
}

// SetBeginIndex is the pipelines' `if hasattr(self.scheduler,
// "set_begin_index"): self.scheduler.set_begin_index(i)`: it sets s's begin
// index when its diffusers class defines set_begin_index, and reports
// whether it did. Call it after SetTimesteps, which clears the index. With
// begin index 0 the first step starts at the first sigma even when the first
// timestep repeats (Karras, exponential or beta sigmas whose sigma_max is
// above the largest training sigma), where the timestep lookup would take
// the second occurrence.
func SetBeginIndex(s Scheduler, i int) bool {
	si, ok := s.(StepIndexer)
	if !ok || !hasBeginIndex[s.Name()] {
		return false
	}
	si.SetBeginIndex(i)
	return true
}

// Classes returns the diffusers class names New accepts, sorted.
func Classes() []string {
	out := make([]string, 0, len(registry))
	for k := range registry {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// maxTrainTimesteps bounds num_train_timesteps.
const maxTrainTimesteps = 1 << 20

// New builds the scheduler class className from a config: the class
// defaults overlaid with config's fields (a diffusers scheduler_config.json
// as a map; unknown fields are kept and ignored). An unknown class is an
// errs.ErrUnsupported error.
func New(className string, config map[string]any) (Scheduler, error) {
	f, ok := registry[className]
	if !ok {
		return nil, errs.Unsupportedf("scheduler class %q is not supported (supported: %s)", className, strings.Join(Classes(), ", "))
	}
	cfg := resolveConfig(className, config)
	cfg["_class_name"] = className
	// The schedule tables are allocated from num_train_timesteps (1000 in
	// every real config); a hostile 1e12 aborted the process with an
	// out-of-memory error.
	if n, ok := cfg["num_train_timesteps"].(float64); ok && n > maxTrainTimesteps {
		return nil, fmt.Errorf("%s config: num_train_timesteps %.0f is over the limit %d", className, n, maxTrainTimesteps)
	}
	s, err := f(className, cfg)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// shortName is a --scheduler choice: a class plus config overrides.
type shortName struct {
	class     string
	overrides map[string]any
	help      string
}

var shortNames = map[string]shortName{
	"ddim":            {"DDIMScheduler", nil, "DDIM (eta 0)"},
	"ddpm":            {"DDPMScheduler", nil, "DDPM ancestral sampling"},
	"pndm":            {"PNDMScheduler", nil, "PNDM (PRK warm-up + PLMS)"},
	"euler":           {"EulerDiscreteScheduler", map[string]any{"use_karras_sigmas": false}, "Euler"},
	"euler_karras":    {"EulerDiscreteScheduler", map[string]any{"use_karras_sigmas": true}, "Euler with Karras sigmas"},
	"euler_a":         {"EulerAncestralDiscreteScheduler", nil, "Euler ancestral"},
	"heun":            {"HeunDiscreteScheduler", map[string]any{"use_karras_sigmas": false}, "Heun (2 model calls per step)"},
	"lms":             {"LMSDiscreteScheduler", map[string]any{"use_karras_sigmas": false}, "linear multistep"},
	"lms_karras":      {"LMSDiscreteScheduler", map[string]any{"use_karras_sigmas": true}, "LMS with Karras sigmas"},
	"dpmpp_2m":        {"DPMSolverMultistepScheduler", map[string]any{"algorithm_type": "dpmsolver++", "solver_order": 2, "use_karras_sigmas": false}, "DPM-Solver++ 2M"},
	"dpmpp_2m_karras": {"DPMSolverMultistepScheduler", map[string]any{"algorithm_type": "dpmsolver++", "solver_order": 2, "use_karras_sigmas": true}, "DPM-Solver++ 2M Karras"},
	"dpmpp_2m_sde": {"DPMSolverMultistepScheduler", map[string]any{"algorithm_type": "sde-dpmsolver++", "solver_order": 2, "use_karras_sigmas": false},
		"DPM-Solver++ 2M SDE"},
	"dpmpp_2m_sde_karras": {"DPMSolverMultistepScheduler", map[string]any{"algorithm_type": "sde-dpmsolver++", "solver_order": 2, "use_karras_sigmas": true},
		"DPM-Solver++ 2M SDE Karras"},
	"dpmpp_2s":   {"DPMSolverSinglestepScheduler", map[string]any{"algorithm_type": "dpmsolver++", "solver_order": 2}, "DPM-Solver++ 2S (singlestep)"},
	"dpm2":       {"KDPM2DiscreteScheduler", nil, "KDPM2"},
	"dpm2_a":     {"KDPM2AncestralDiscreteScheduler", nil, "KDPM2 ancestral"},
	"unipc":      {"UniPCMultistepScheduler", nil, "UniPC multistep"},
	"deis":       {"DEISMultistepScheduler", nil, "DEIS multistep"},
	"lcm":        {"LCMScheduler", nil, "latent consistency (LCM-distilled models)"},
	"tcd":        {"TCDScheduler", nil, "trajectory consistency distillation"},
	"sa_solver":  {"SASolverScheduler", nil, "SA-Solver"},
	"edm_euler":  {"EDMEulerScheduler", nil, "EDM Euler"},
	"flow_euler": {"FlowMatchEulerDiscreteScheduler", nil, "flow-matching Euler (SD3, Flux)"},
	"flow_heun":  {"FlowMatchHeunDiscreteScheduler", nil, "flow-matching Heun"},
}

// Names returns the short scheduler names for a --scheduler flag, sorted,
// limited to classes this package implements.
func Names() []string {
	out := make([]string, 0, len(shortNames))
	for k, v := range shortNames {
		if _, ok := registry[v.class]; ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// Known reports whether a --scheduler value names a scheduler: a short
// name (Names) or any implemented diffusers class name (Classes).
func Known(name string) bool {
	if _, ok := registry[name]; ok {
		return true
	}
	return slices.Contains(Names(), name)
}

// FromShortName builds the scheduler named by a --scheduler value from a
// model's scheduler config, like diffusers'
// NewScheduler.from_config(pipe.scheduler.config, **overrides): the base
// config's fields (training betas, timestep spacing, prediction type, ...)
// carry over, fields the new class does not know are ignored, and the short
// name's overrides (e.g. use_karras_sigmas) apply on top. The value may
// also be a diffusers class name, with no overrides, so that every
// implemented class is reachable. An unknown name is an errs.ErrUsage
// error.
func FromShortName(name string, base map[string]any) (Scheduler, error) {
	sn, ok := shortNames[name]
	if _, isClass := registry[name]; !ok && isClass {
		sn, ok = shortName{class: name}, true
	}
	if !ok {
		return nil, errs.Usagef("unknown scheduler %q (want one of %s, or a diffusers class name: %s)", name, strings.Join(Names(), ", "), strings.Join(Classes(), ", "))
	}
	if _, ok := registry[sn.class]; !ok {
		return nil, errs.Unsupportedf("scheduler %q (%s) is not implemented", name, sn.class)
	}
	cfg := map[string]any{}
	for k, v := range base {
		if k == "_class_name" {
			continue
		}
		cfg[k] = v
	}
	for k, v := range sn.overrides {
		cfg[k] = v
	}
	s, err := New(sn.class, cfg)
	if err != nil {
		return nil, fmt.Errorf("scheduler %q: %w", name, err)
	}
	return s, nil
}
