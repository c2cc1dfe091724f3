// summary.html: sort the models table by a clicked column heading (numbers numerically).
document.querySelectorAll("table.sortable").forEach(function (table) {
  var headers = table.querySelectorAll("th[data-type]");
  headers.forEach(function (th, index) {
    th.tabIndex = 0;
    function sort() {
      var ascending = th.getAttribute("aria-sort") !== "ascending";
      headers.forEach(function (other) { other.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
      var numeric = th.dataset.type === "num";
      var column = Array.prototype.indexOf.call(th.parentNode.children, th);
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      function key(row) { var cell = row.cells[column]; return cell.dataset.sort !== undefined ? cell.dataset.sort : cell.textContent.trim(); }
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        if (numeric) {
          // a model without the number (an error: no nodes) sorts last either way
          if (x === "" || y === "") { return (x === "") - (y === ""); }
          return ascending ? Number(x) - Number(y) : Number(y) - Number(x);
        }
        var order = x.localeCompare(y, undefined, {numeric: true, sensitivity: "base"});
        return ascending ? order : -order;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    }
    th.addEventListener("click", sort);
    th.addEventListener("keydown", function (event) { if (event.key === "Enter" || event.key === " ") { event.preventDefault(); sort(); } });
  });
});
