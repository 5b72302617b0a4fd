// What mapReduce adds to a scope on its first map call: `emit`, and the Array helpers
// of mongod's scope that reduce functions use (Array.sum, ...). Installed only then,
// so other scripts' heaps stay as they were.
(function (g) {
  "use strict";
  function hidden(o, k, v) {
    Object.defineProperty(o, k, { value: v, enumerable: false, writable: true, configurable: true });
  }
  hidden(g, "emit", function (k, v) {
    if (arguments.length != 2) throw new Error("emit takes 2 args");
    g.__emitted.push(k === undefined ? null : k, v === undefined ? null : v);
  });
  hidden(Array, "contains", function (a, x) {
    for (var i = 0; i < a.length; i++) if (a[i] == x) return true;
    return false;
  });
  hidden(Array, "unique", function (a) {
    var u = [];
    for (var i = 0; i < a.length; i++) if (!Array.contains(u, a[i])) u.push(a[i]);
    return u;
  });
  hidden(Array, "sum", function (a) {
    if (a.length == 0) return null;
    var s = a[0];
    for (var i = 1; i < a.length; i++) s += a[i];
    return s;
  });
  hidden(Array, "avg", function (a) {
    if (a.length == 0) return null;
    return Array.sum(a) / a.length;
  });
  hidden(Array, "stdDev", function (a) {
    var avg = Array.avg(a);
    var sum = 0;
    for (var i = 0; i < a.length; i++) sum += (a[i] - avg) * (a[i] - avg);
    return Math.sqrt(sum / a.length);
  });
})(globalThis);
