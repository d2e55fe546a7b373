/* Runs in <head>, before the page is drawn: marks that scripts run, so that controls which
   only work with JavaScript (.js-only) show from the first paint. A file rather than an
   inline script because the Content-Security-Policy allows scripts only from Strand's
   static files. */
document.documentElement.classList.add("js");
