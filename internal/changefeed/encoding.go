package changefeed

import (
	"golang.org/x/text/encoding"
	"golang.org/x/text/encoding/charmap"
	"golang.org/x/text/encoding/japanese"
	"golang.org/x/text/encoding/korean"
	"golang.org/x/text/encoding/simplifiedchinese"
)

// serverEncodings maps the Postgres server encodings that are not UTF-8 to their decoders. A
// logical message's content is the one thing pgoutput sends without converting it to the
// session's client_encoding (values and names are converted, see pinnedSettings): it is the
// emitting function's bytes, which for pg_logical_emit_message(..., text) are text in the
// database's encoding. SQL_ASCII (no encoding at all), MULE_INTERNAL, EUC_TW and EUC_JIS_2004
// have no decoder here; their content is passed on as it is.
var serverEncodings = map[string]encoding.Encoding{
	"LATIN1":     charmap.ISO8859_1,
	"LATIN2":     charmap.ISO8859_2,
	"LATIN3":     charmap.ISO8859_3,
	"LATIN4":     charmap.ISO8859_4,
	"LATIN5":     charmap.ISO8859_9,
	"LATIN6":     charmap.ISO8859_10,
	"LATIN7":     charmap.ISO8859_13,
	"LATIN8":     charmap.ISO8859_14,
	"LATIN9":     charmap.ISO8859_15,
	"LATIN10":    charmap.ISO8859_16,
	"ISO_8859_5": charmap.ISO8859_5,
	"ISO_8859_6": charmap.ISO8859_6,
	"ISO_8859_7": charmap.ISO8859_7,
	"ISO_8859_8": charmap.ISO8859_8,
	"WIN866":     charmap.CodePage866,
	"WIN874":     charmap.Windows874,
	"WIN1250":    charmap.Windows1250,
	"WIN1251":    charmap.Windows1251,
	"WIN1252":    charmap.Windows1252,
	"WIN1253":    charmap.Windows1253,
	"WIN1254":    charmap.Windows1254,
	"WIN1255":    charmap.Windows1255,
	"WIN1256":    charmap.Windows1256,
	"WIN1257":    charmap.Windows1257,
	"WIN1258":    charmap.Windows1258,
	"KOI8R":      charmap.KOI8R,
	"KOI8U":      charmap.KOI8U,
	"EUC_JP":     japanese.EUCJP,
	"EUC_KR":     korean.EUCKR,
	// GBK is a superset of GB2312 in its EUC form, which is what EUC_CN is.
	"EUC_CN": simplifiedchinese.GBK,
}

// messageText returns how logical message content in a database of serverEncoding (the
// connection's server_encoding parameter) becomes text.
func messageText(serverEncoding string) func([]byte) string {
	enc, ok := serverEncodings[serverEncoding]
	if !ok {
		return func(b []byte) string { return string(b) }
	}
	return func(b []byte) string {
		out, err := enc.NewDecoder().Bytes(b)
		if err != nil {
			return string(b)
		}
		return string(out)
	}
}
