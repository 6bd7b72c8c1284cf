package safetensors

// The raw-bytes conversions the tests and benchmarks compare against
// (Checkpoint.Float32 and Float32Checked go through Checkpoint.Convert).

// ToFloat32 converts little-endian raw tensor bytes of dtype d into a new
// float32 slice. Integer and bool types convert by value.
func ToFloat32(d DType, raw []byte) ([]float32, error) {
	if err := checkRaw(d, raw); err != nil {
		return nil, err
	}
	out := make([]float32, len(raw)/d.Size())
	DecodeFloat32(out, d, raw)
	return out, nil
}

// ToFloat32Checked is ToFloat32 that also counts the NaN and infinite
// elements, as NonFinite does, while it converts (see ConvertChecked).
func ToFloat32Checked(d DType, raw []byte) (out []float32, count, first int64, err error) {
	if err := checkRaw(d, raw); err != nil {
		return nil, 0, -1, err
	}
	out = make([]float32, len(raw)/d.Size())
	count, first = ConvertChecked(d, raw, func(at int, piece []byte) { DecodeFloat32(out[at:], d, piece) })
	return out, count, first, nil
}
