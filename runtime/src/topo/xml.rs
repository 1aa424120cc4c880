//! The XML layer shared by topology and graph files: a plain element tree that keeps every
//! attribute in its original order (so a file NCCL wrote survives a read and a write with
//! the attributes jitccl does not interpret), read with roxmltree and written with
//! quick-xml in NCCL's layout (two-space indent, one element a line).

use quick_xml::events::{BytesEnd, BytesStart, Event};
use quick_xml::Writer;

use super::TopoError;

/// One XML element: name, attributes in file order, child elements, and the line it
/// started on (0 for elements jitccl made), for error messages.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Element {
    pub name: String,
    pub attrs: Vec<(String, String)>,
    pub children: Vec<Element>,
    pub line: u32,
}

impl Element {
    pub fn new(name: &str) -> Element {
        Element { name: name.to_string(), ..Element::default() }
    }

    /// Builder form of [`Element::set`].
    pub fn with(mut self, key: &str, value: impl ToString) -> Element {
        self.set(key, value);
        self
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.attrs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// Sets `key`, in place when present (keeping the order), else appended.
    pub fn set(&mut self, key: &str, value: impl ToString) {
        let value = value.to_string();
        match self.attrs.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.attrs.push((key.to_string(), value)),
        }
    }

    /// Sets `key` only when the element lacks it (detection completing a file).
    pub fn set_default(&mut self, key: &str, value: impl ToString) {
        if self.get(key).is_none() {
            self.set(key, value);
        }
    }

    /// The child elements named `name`.
    pub fn children_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Element> + 'a {
        self.children.iter().filter(move |c| c.name == name)
    }
}

/// Parses `text` (from `file`, named in errors) into its root element. Comments,
/// processing instructions and whitespace are dropped; text content is refused (neither
/// format has any).
pub fn parse(file: &str, text: &str) -> Result<Element, TopoError> {
    let doc = roxmltree::Document::parse(text).map_err(|e| TopoError::Malformed {
        file: file.to_string(),
        line: e.pos().row,
        reason: strip_position(&e.to_string()),
    })?;
    convert(file, &doc, doc.root_element(), 0)
}

/// Deepest element nesting accepted: real files nest a few PCIe switches; a limit keeps a
/// hostile file from exhausting the stack.
const MAX_DEPTH: usize = 64;

/// roxmltree ends its messages with " at ROW:COL"; the line is reported separately.
fn strip_position(msg: &str) -> String {
    match msg.rfind(" at ") {
        Some(i) if msg[i + 4..].chars().all(|c| c.is_ascii_digit() || c == ':') => msg[..i].to_string(),
        _ => msg.to_string(),
    }
}

fn convert(file: &str, doc: &roxmltree::Document, node: roxmltree::Node, depth: usize) -> Result<Element, TopoError> {
    let line = doc.text_pos_at(node.range().start).row;
    if depth > MAX_DEPTH {
        let reason = format!("elements nested more than {MAX_DEPTH} deep");
        return Err(TopoError::Malformed { file: file.to_string(), line, reason });
    }
    let mut el = Element {
        name: node.tag_name().name().to_string(),
        attrs: node.attributes().map(|a| (a.name().to_string(), a.value().to_string())).collect(),
        children: Vec::new(),
        line,
    };
    for child in node.children() {
        if child.is_element() {
            el.children.push(convert(file, doc, child, depth + 1)?);
        } else if child.is_text() && !child.text().unwrap_or("").trim().is_empty() {
            let line = doc.text_pos_at(child.range().start).row;
            let reason = format!("unexpected text inside <{}>", el.name);
            return Err(TopoError::Malformed { file: file.to_string(), line, reason });
        }
    }
    Ok(el)
}

/// Writes `root` and its subtree as a document (no XML declaration, as NCCL writes it),
/// ending with a newline.
pub fn write(root: &Element) -> String {
    let mut w = Writer::new_with_indent(Vec::new(), b' ', 2);
    // Writing into a Vec cannot fail; an error would only lose the output, never panic.
    let _ = write_element(&mut w, root);
    let mut out = String::from_utf8(w.into_inner()).unwrap_or_default();
    out.push('\n');
    out
}

fn write_element(w: &mut Writer<Vec<u8>>, el: &Element) -> std::io::Result<()> {
    let mut start = BytesStart::new(el.name.as_str());
    for (k, v) in &el.attrs {
        start.push_attribute((k.as_str(), v.as_str()));
    }
    if el.children.is_empty() {
        return w.write_event(Event::Empty(start));
    }
    w.write_event(Event::Start(start))?;
    for c in &el.children {
        write_element(w, c)?;
    }
    w.write_event(Event::End(BytesEnd::new(el.name.as_str())))
}

/// The error for a bad value of attribute `key` of `el`.
pub fn bad_attr(file: &str, el: &Element, key: &str, why: &str) -> TopoError {
    let value = el.get(key).unwrap_or("");
    TopoError::Malformed {
        file: file.to_string(),
        line: el.line,
        reason: format!("<{}> attribute {key}=\"{value}\": {why}", el.name),
    }
}

/// Attribute `key` of `el` as a number (decimal, or hex with 0x); `None` when absent.
pub fn num_attr(file: &str, el: &Element, key: &str) -> Result<Option<u64>, TopoError> {
    let Some(v) = el.get(key) else { return Ok(None) };
    let v = v.trim();
    let parsed = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse::<u64>(),
    };
    parsed.map(Some).map_err(|_| bad_attr(file, el, key, "expected a whole number"))
}

/// Attribute `key` as a signed decimal (NCCL writes -1 for "unknown").
pub fn int_attr(file: &str, el: &Element, key: &str) -> Result<Option<i64>, TopoError> {
    let Some(v) = el.get(key) else { return Ok(None) };
    v.trim().parse::<i64>().map(Some).map_err(|_| bad_attr(file, el, key, "expected an integer"))
}

/// Attribute `key` as a decimal fraction.
pub fn float_attr(file: &str, el: &Element, key: &str) -> Result<Option<f64>, TopoError> {
    let Some(v) = el.get(key) else { return Ok(None) };
    match v.trim().parse::<f64>() {
        Ok(x) if x.is_finite() => Ok(Some(x)),
        _ => Err(bad_attr(file, el, key, "expected a number")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_keeps_attribute_order_and_escapes() {
        let text = "<system version=\"1\">\n  <cpu b=\"2\" a=\"x&amp;y\"/>\n</system>\n";
        let el = parse("t.xml", text).unwrap();
        assert_eq!(el.children[0].attrs, vec![("b".into(), "2".into()), ("a".into(), "x&y".into())]);
        assert_eq!(el.children[0].line, 2);
        assert_eq!(write(&el), text);
    }

    #[test]
    fn errors_name_file_and_line() {
        let e = parse("bad.xml", "<system>\n<cpu>\n</system>").unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("bad.xml:3: "), "{msg}");
        let e = parse("t.xml", "<system>\n  hello\n</system>").unwrap_err().to_string();
        assert!(e.starts_with("t.xml:1: unexpected text"), "{e}");
        let deep = format!("{}{}", "<pci>\n".repeat(100_000), "</pci>\n".repeat(100_000));
        let e = parse("d.xml", &deep).unwrap_err().to_string();
        assert!(e.starts_with("d.xml:") && e.contains("nested"), "{e}");
    }

    #[test]
    fn numbers_decimal_and_hex() {
        let el = Element::new("x").with("a", "0x10").with("b", "12").with("c", "z");
        assert_eq!(num_attr("f", &el, "a").unwrap(), Some(16));
        assert_eq!(num_attr("f", &el, "b").unwrap(), Some(12));
        assert_eq!(num_attr("f", &el, "d").unwrap(), None);
        assert!(num_attr("f", &el, "c").unwrap_err().to_string().contains("c=\"z\""));
    }
}
