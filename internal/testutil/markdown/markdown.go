// Package markdown reads the fenced code blocks of Markdown documents, for the tests that check
// what the documents show: every policy example valid, every command of the quickstart run as
// printed.
package markdown

import (
	"os"
	"regexp"
	"strings"
)

// Block is one fenced code block.
type Block struct {
	// Lang is the first word of the fence's info string: yaml, sh, text; empty for none.
	Lang string
	// Text is the block's content with the fence's indentation removed, each line ending in
	// a newline.
	Text string
	// Line is the line number of the opening fence, from 1.
	Line int
}

var fence = regexp.MustCompile("^\\s*```(\\S*)\\s*$")

// Blocks returns the fenced code blocks of a document, in order. A block left open at the end
// of the document ends there.
func Blocks(doc string) []Block {
	lines := strings.Split(doc, "\n")
	var blocks []Block
	for i := 0; i < len(lines); i++ {
		m := fence.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		indent := strings.Repeat(" ", len(lines[i])-len(strings.TrimLeft(lines[i], " ")))
		b := Block{Lang: m[1], Line: i + 1}
		var text strings.Builder
		for i++; i < len(lines) && !fence.MatchString(lines[i]); i++ {
			text.WriteString(strings.TrimPrefix(lines[i], indent))
			text.WriteByte('\n')
		}
		b.Text = text.String()
		blocks = append(blocks, b)
	}
	return blocks
}

// File returns the fenced code blocks of the document at path.
func File(path string) ([]Block, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Blocks(string(data)), nil
}

// Of returns the blocks whose Lang is lang, in order.
func Of(blocks []Block, lang string) []Block {
	var out []Block
	for _, b := range blocks {
		if b.Lang == lang {
			out = append(out, b)
		}
	}
	return out
}
