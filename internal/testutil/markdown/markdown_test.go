package markdown

import (
	"reflect"
	"testing"
)

func TestBlocks(t *testing.T) {
	doc := "# Title\n\n```sh\necho one\necho two\n```\n\ntext\n\n1. A step:\n\n   ```yaml\n   a: 1\n     b: 2\n   ```\n\n```\nplain\n```\n```text\nleft open\n"
	want := []Block{
		{Lang: "sh", Text: "echo one\necho two\n", Line: 3},
		{Lang: "yaml", Text: "a: 1\n  b: 2\n", Line: 12},
		{Lang: "", Text: "plain\n", Line: 17},
		{Lang: "text", Text: "left open\n\n", Line: 20},
	}
	if got := Blocks(doc); !reflect.DeepEqual(got, want) {
		t.Errorf("Blocks:\n got %+v\nwant %+v", got, want)
	}
	if got := Of(want, "yaml"); len(got) != 1 || got[0].Line != 12 {
		t.Errorf("Of yaml: %v", got)
	}
}
