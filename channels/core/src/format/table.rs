//! Tables laid out as aligned monospace text, for dialects that cannot render them.

use super::block::is_delimiter_row;
use super::plain::inline_text;

/// Lay out table rows (as written, delimiter row included) in aligned columns:
///
/// ```text
/// Name  | Qty
/// ------+----
/// apple | 3
/// ```
pub(super) fn layout(rows: &[&str]) -> String {
    let mut header_rule = false;
    let mut cells: Vec<Vec<String>> = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        if is_delimiter_row(row) {
            header_rule |= i == 1;
            continue;
        }
        cells.push(split_row(row).iter().map(|c| inline_text(c)).collect());
    }
    let columns = cells.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0; columns];
    for row in &cells {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut lines = Vec::new();
    for (i, row) in cells.iter().enumerate() {
        let padded: Vec<String> = widths
            .iter()
            .enumerate()
            .map(|(c, w)| {
                let cell = row.get(c).map_or("", String::as_str);
                format!("{cell}{}", " ".repeat(w - cell.chars().count()))
            })
            .collect();
        lines.push(padded.join(" | ").trim_end().to_string());
        if i == 0 && header_rule {
            let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
            lines.push(rule.join("-+-"));
        }
    }
    lines.join("\n")
}

/// Cells of one row: split at `|` outside code spans and not escaped, outer pipes dropped.
fn split_row(row: &str) -> Vec<String> {
    let t = row.trim();
    let t = t.strip_prefix('|').unwrap_or(t);
    let t = t
        .strip_suffix('|')
        .filter(|_| !t.ends_with("\\|"))
        .unwrap_or(t);
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut in_code = false;
    let mut chars = t.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('|') => cell.push('|'),
                Some(n) => {
                    cell.push('\\');
                    cell.push(n);
                }
                None => cell.push('\\'),
            },
            '`' => {
                in_code = !in_code;
                cell.push(c);
            }
            '|' if !in_code => cells.push(std::mem::take(&mut cell).trim().to_string()),
            _ => cell.push(c),
        }
    }
    cells.push(cell.trim().to_string());
    cells
}
