package schema_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"

	"github.com/tempotent/tempotent/internal/receipttest"
	"github.com/tempotent/tempotent/internal/schema"
)

// A result column reads back as the payload that was stored: sealed with the codecs at rest, a
// void result as none.
func TestResultColumnRoundTrip(t *testing.T) {
	t.Parallel()
	codecs := []converter.PayloadCodec{receipttest.Rot13Codec{}}
	void, err := schema.EncodeResult(codecs, nil)
	require.NoError(t, err)
	require.Equal(t, schema.VoidResult, void, "a void result is not stored as the migrations' value")
	p, err := schema.DecodeResult(codecs, void)
	require.NoError(t, err)
	require.Nil(t, p, "a void result replays as a payload")

	want, err := converter.GetDefaultDataConverter().ToPayload(map[string]string{"charge_id": "ch_secret"})
	require.NoError(t, err)
	stored, err := schema.EncodeResult(codecs, want)
	require.NoError(t, err)
	require.False(t, bytes.Contains(stored, []byte("ch_secret")), "the codecs did not seal the stored result")
	got, err := schema.DecodeResult(codecs, stored)
	require.NoError(t, err)
	require.Equal(t, want.GetData(), got.GetData())
	require.Equal(t, want.GetMetadata(), got.GetMetadata())

	_, err = schema.DecodeResult(nil, stored)
	require.NoError(t, err, "without the codecs a sealed result still decodes, as its sealed payload")
	_, err = schema.DecodeResult(codecs, []byte{0xff})
	require.ErrorContains(t, err, "decode recorded result")
}
