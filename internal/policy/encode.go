package policy

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"

	kgzip "github.com/klauspost/compress/gzip"
)

// Parse decodes and validates a rendered document.
func Parse(data []byte) (*Document, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var d Document
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", DataKey, err)
	}
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("invalid %s: %w", DataKey, err)
	}
	return &d, nil
}

// Marshal encodes a document deterministically and compactly: policies sorted by the caller
// (render.Build sorts), fields in declaration order, no indentation, a final newline.
func Marshal(d *Document) ([]byte, error) {
	if d.Policies == nil {
		d.Policies = []Policy{}
	}
	b, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// MarshalIndent is Marshal with two-space indentation, for people to read (sluicectl render
// --pretty); readers accept both.
func MarshalIndent(d *Document) ([]byte, error) {
	b, err := Marshal(d)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// Payload is a document encoded as the ConfigMap's data and binaryData.
type Payload struct {
	Data       map[string]string
	BinaryData map[string][]byte
	// Hash is Hash of the compact document, compressed or not.
	Hash string
	// Plain is the size of the compact document.
	Plain int
}

// Size is what the payload counts against MaxConfigMapBytes: the keys' values.
func (p *Payload) Size() int {
	n := 0
	for _, v := range p.Data {
		n += len(v)
	}
	for _, v := range p.BinaryData {
		n += len(v)
	}
	return n
}

// envelope is what DataKey holds when the document is compressed.
type envelope struct {
	Version   int    `json:"version"`
	Namespace string `json:"namespace"`
	Encoding  string `json:"encoding"`
	Key       string `json:"key"`
	// SHA256 is the hash of the compressed bytes, so a reader notices a torn pair of files.
	SHA256 string `json:"sha256"`
}

// Encode encodes d for a ConfigMap: the compact document under DataKey when it is at most
// CompressThreshold bytes; otherwise its gzip under CompressedKey (binaryData) and, under
// DataKey, an envelope of version CompressedVersion that names it. The output is deterministic.
func Encode(d *Document) (*Payload, error) {
	plain, err := Marshal(d)
	if err != nil {
		return nil, err
	}
	p := &Payload{Hash: Hash(plain), Plain: len(plain)}
	if len(plain) <= CompressThreshold {
		p.Data = map[string]string{DataKey: string(plain)}
		return p, nil
	}
	var buf bytes.Buffer
	// klauspost/compress's level 3 (any gzip reader reads it): measured on 2.7 MB of policies,
	// 4 to 10 times faster than compress/gzip's default level with output as small or smaller,
	// which is what a controller rendering large namespaces on every change pays.
	zw, _ := kgzip.NewWriterLevel(&buf, 3) // a valid level: no error
	if _, err := zw.Write(plain); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	env, err := json.Marshal(envelope{Version: CompressedVersion, Namespace: d.Namespace, Encoding: "gzip", Key: CompressedKey, SHA256: Hash(buf.Bytes())})
	if err != nil {
		return nil, err
	}
	p.Data = map[string]string{DataKey: string(env) + "\n"}
	p.BinaryData = map[string][]byte{CompressedKey: buf.Bytes()}
	return p, nil
}

// CompressedFile reports whether data (the content of DataKey) is an envelope, and the name
// of the file beside it that holds the compressed document.
func CompressedFile(data []byte) (key string, ok bool) {
	var env envelope
	if json.Unmarshal(data, &env) != nil || env.Version != CompressedVersion {
		return "", false
	}
	if env.Key != CompressedKey {
		return "", false // the only name a reader opens: never a path from the file
	}
	return env.Key, true
}

// Decode decodes and validates what a ConfigMap holds: data is DataKey's content and
// compressed CompressedKey's (nil when absent). A plain document is Parse(data); an envelope
// needs compressed, whose hash it checks before inflating at most 64 MiB of it.
func Decode(data, compressed []byte) (*Document, error) {
	var env envelope
	if json.Unmarshal(data, &env) != nil || env.Version != CompressedVersion {
		return Parse(data)
	}
	if env.Encoding != "gzip" || env.Key != CompressedKey {
		return nil, fmt.Errorf("%s: encoding %q under key %q is not gzip under %s", DataKey, env.Encoding, env.Key, CompressedKey)
	}
	if compressed == nil {
		return nil, fmt.Errorf("%s names %s, which is missing", DataKey, CompressedKey)
	}
	if Hash(compressed) != env.SHA256 {
		return nil, fmt.Errorf("%s does not have the hash %s names (a torn update?)", CompressedKey, DataKey)
	}
	zr, err := gzip.NewReader(bytes.NewReader(compressed))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", CompressedKey, err)
	}
	plain, err := io.ReadAll(io.LimitReader(zr, maxDecompressed+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", CompressedKey, err)
	}
	if len(plain) > maxDecompressed {
		return nil, fmt.Errorf("%s inflates to more than %d bytes", CompressedKey, maxDecompressed)
	}
	return Parse(plain)
}

// Hash is the content hash written to HashAnnotation.
func Hash(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
